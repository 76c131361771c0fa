"""Bounded echoes: the one helper every service uses before a client-supplied value reaches an error
message, an error detail, a log line, a span attribute, a span status or an exception event.

`clip(value)` keeps the first `ECHO_MAX_CHARS` (200) characters and appends a visible marker naming
how much was cut: `"aaaa…(+6800 chars)"`. 200 characters keep every legitimate value we echo
(resource names, field paths, UUIDs, enum names) whole; a clipped value can no longer grow a
google.rpc.Status past gRPC's metadata limit (16 KiB hard on the client) nor a span past the
exporter's batch budget (`services.common.telemetry`).

Whole strings built from several values (a status message, a log line) are bounded again at
`MESSAGE_MAX_CHARS` (1024) where they leave the process: `services.common.errors.to_status` and the
log handler of `services.common.telemetry.setup_logging`.
"""
from __future__ import annotations

ECHO_MAX_CHARS = 200
MESSAGE_MAX_CHARS = 1024
MARKER = "…(+{} chars)"


def clip(value: object, limit: int = ECHO_MAX_CHARS) -> str:
    """`str(value)` cut to `limit` characters plus the marker `…(+N chars)` (N = characters cut);
    unchanged when it fits. Never raises (a value whose `str` fails is named by its type)."""
    try:
        s = value if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - an echo must never turn into an error of its own
        s = f"<unprintable {type(value).__name__}>"
    if len(s) <= limit:
        return s
    return s[:limit] + MARKER.format(len(s) - limit)


def clip_message(value: object) -> str:
    """`clip` at the whole-message bound (`MESSAGE_MAX_CHARS`)."""
    return clip(value, MESSAGE_MAX_CHARS)


def truncate(value: str, max_chars: int) -> tuple[str, bool]:
    """A copy kept for evidence (a snapshot of a turn, not the owner's words and not an echo) cut to
    `max_chars` code points without a marker; returns (text, whether it was cut)."""
    if len(value) <= max_chars:
        return value, False
    return value[:max_chars], True
