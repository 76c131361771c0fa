"""Bounded echoes: the one helper every service uses before a client-supplied value reaches an error
message, an error detail, a log line, a span attribute, a span status or an exception event.

`clip(value)` keeps the first `ECHO_MAX_CHARS` (200) characters and appends a visible marker naming
how much was cut: `"aaaa…(+6800 chars)"`; a character no reader can see (a control such as ESC or
LF, a bidi override such as U+202E, a zero-width space) is written as its escape (`\x1b`, `\n`,
`\u202e`), so an echoed value cannot recolour a terminal, forge a log line or reorder the text
around it. 200 characters keep every legitimate value we echo
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


def _text(value: object) -> str:
    try:
        return value if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - an echo must never turn into an error of its own
        return f"<unprintable {type(value).__name__}>"


def _cut(s: str, limit: int) -> str:
    return s if len(s) <= limit else s[:limit] + MARKER.format(len(s) - limit)


def clip(value: object, limit: int = ECHO_MAX_CHARS) -> str:
    """`str(value)` cut to `limit` characters plus the marker `…(+N chars)` (N = characters cut),
    its invisible characters escaped (module docstring); unchanged when it fits and is all printable.
    Never raises (a value whose `str` fails is named by its type)."""
    s = _text(value)
    if not s[:limit].isprintable():
        return _escaped(s, limit)
    return _cut(s, limit)


def _escaped(s: str, limit: int) -> str:
    """`clip` of a value holding characters a reader cannot see: each one not printable (controls such
    as ESC, CR, LF; bidi and zero-width format characters; separators other than the space) written as
    its Python escape, at most `limit` characters in all, the marker counting the characters not shown."""
    out: list[str] = []
    n = 0
    for used, c in enumerate(s):
        piece = c if c.isprintable() else repr(c)[1:-1]
        if n + len(piece) > limit:
            return "".join(out) + MARKER.format(len(s) - used)
        out.append(piece)
        n += len(piece)
    return "".join(out)


def clip_message(value: object) -> str:
    """A whole message (a status message, a log line: the service's own words around values already
    `clip`ped) cut at `MESSAGE_MAX_CHARS` with the marker; its line breaks are kept."""
    return _cut(_text(value), MESSAGE_MAX_CHARS)


def truncate(value: str, max_chars: int) -> tuple[str, bool]:
    """A copy kept for evidence (a snapshot of a turn, not the owner's words and not an echo) cut to
    `max_chars` code points without a marker; returns (text, whether it was cut)."""
    if len(value) <= max_chars:
        return value, False
    return value[:max_chars], True
