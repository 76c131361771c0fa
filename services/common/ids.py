"""Identifiers, resource names, request ids, timestamps, durations and the text policy shared by the services
(page tokens and page sizes: `services.common.pages`)."""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import threading
import uuid
from typing import Any

from services.common.clip import clip
from services.common.errors import InvalidArgument

HEX32 = re.compile(r"^[0-9a-f]{32}\Z")  # \Z: "$" would also accept a final newline
HEX16 = re.compile(r"^[0-9a-f]{16}\Z")


# os.urandom read RANDOM_POOL_BYTES at a time (`random_bytes`): one getrandom call and one bytes object
# per 4 KiB, not per id. A put makes four ids (the rating's, the trace's, two spans'), each its own
# syscall and Python-level SystemRandom / UUID construction before (issue 29). The lock: ids are made
# on several threads (the span pipe's, the SDK's exporters); a forked child starts with an empty pool
# (it must never hand out its parent's bytes).
RANDOM_POOL_BYTES = 4096
_random_lock = threading.Lock()
_random_pool = b""
_random_pos = 0


def _empty_random_pool() -> None:
    global _random_pool, _random_pos
    _random_pool, _random_pos = b"", 0


os.register_at_fork(after_in_child=_empty_random_pool)


def random_bytes(n: int) -> bytes:
    """`n` (at most RANDOM_POOL_BYTES) bytes of os.urandom, each handed out once."""
    global _random_pool, _random_pos
    with _random_lock:
        end = _random_pos + n
        if end > len(_random_pool):
            _random_pool, _random_pos, end = os.urandom(RANDOM_POOL_BYTES), 0, n
        out = _random_pool[_random_pos:end]
        _random_pos = end
    return out


def new_id() -> str:
    """A resource id: 32 lowercase hex characters (UUID4 without dashes: version 4, RFC 4122 variant)."""
    b = bytearray(random_bytes(16))
    b[6] = b[6] & 0x0F | 0x40
    b[8] = b[8] & 0x3F | 0x80
    return b.hex()


def parse_request_id(value: str, field_path: str = "request_id", required: bool = False) -> uuid.UUID | None:
    """AIP-155 request id: a UUID (any version accepted on input, UUID4 recommended).

    Returns None when empty and not required; InvalidArgument naming `field_path` otherwise.
    """
    if not value:
        if required:
            raise InvalidArgument(field_path, "is required (a UUID4); retries with the same id return the first result")
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidArgument(field_path, f"must be a UUID (got {clip(value, 40)!r})") from None


def request_id_of(request: Any) -> uuid.UUID | None:
    """`request.request_id` as a UUID; None when empty or not a UUID (for a lookup, not a check)."""
    try:
        return parse_request_id(request.request_id)
    except InvalidArgument:
        return None


def parse_trace_id(value: str, field_path: str = "trace_id") -> str:
    """A W3C trace id as 32 lowercase hex; InvalidArgument when malformed or all zeros."""
    v = value.strip().lower()
    if not HEX32.match(v):
        raise InvalidArgument(field_path, "must be 32 hexadecimal characters (W3C trace-id)")
    if v == "0" * 32:
        raise InvalidArgument(field_path, "must not be all zeros (W3C trace-id)")
    return v


# An id inside a resource name (one path segment).
_NAME_ID = "[a-zA-Z0-9_-]{1,64}"
# pattern → the compiled regex of the names it accepts: a well-formed name (nearly every call; the agent
# checks every history message's name each turn) takes one fullmatch, not a split and a match per segment.
_NAME_RES: dict[str, re.Pattern[str]] = {}
_ID_RE = re.compile(_NAME_ID)


# A workspace artifact's id: a decimal ≥ 1 the chat service assigns in order (never reused); 2**62 keeps
# it within PostgreSQL's bigint and JSON's exact integers with room to spare.
MAX_ARTIFACT_ID = 2**62


def decimal_id(raw: str, max_id: int = MAX_ARTIFACT_ID) -> int | None:
    """`raw` as a canonical decimal id in 1..`max_id` (ASCII digits, no sign, no leading zero), or None.

    One spelling per id (AIP-122: a resource has one name): `007` or `٣` (a non-ASCII digit) is not
    another spelling of artifact 7 or 3 but no id at all, so a cache, a ledger key or a link built from
    the name never holds two names for one resource."""
    if not (raw.isascii() and raw.isdigit()) or raw[0] == "0" or len(raw) > len(str(max_id)):
        return None
    n = int(raw)
    return n if n <= max_id else None


def is_name_under(name: str, prefix: str) -> bool:
    """Whether `name` is `prefix` (e.g. `instances/abc/messages/`, its ids well-formed) followed by one
    well-formed id: what `parse_name` accepts, read as one startswith and one fullmatch from the prefix's
    end (the agent checks every history message's name of every turn: 0.95 -> 0.5 us a name)."""
    return name.startswith(prefix) and _ID_RE.fullmatch(name, len(prefix)) is not None


def _name_re(pattern: str) -> re.Pattern[str]:
    got = _NAME_RES.get(pattern)
    if got is None:
        got = _NAME_RES[pattern] = re.compile(
            "/".join(f"({_NAME_ID})" if p == "{}" else re.escape(p) for p in pattern.split("/")))
    return got


def parse_name(value: str, pattern: str, field_path: str) -> tuple[str, ...]:
    """Split a resource name by `pattern` (e.g. `instances/{}/messages/{}`) into its ids;
    InvalidArgument naming `field_path` when it does not have that shape."""
    m = _name_re(pattern).fullmatch(value)
    if m is not None:
        return m.groups()
    parts = value.split("/")
    pparts = pattern.split("/")
    if len(parts) != len(pparts):
        raise InvalidArgument(field_path, f"must look like {pattern.replace('{}', '{id}')}")
    ids = []
    for got, want in zip(parts, pparts, strict=True):
        if want == "{}":
            if not got or not re.match(rf"^{_NAME_ID}\Z", got):
                raise InvalidArgument(field_path, f"must look like {pattern.replace('{}', '{id}')}")
            ids.append(got)
        elif got != want:
            raise InvalidArgument(field_path, f"must look like {pattern.replace('{}', '{id}')}")
    return tuple(ids)


# google.protobuf.Timestamp's documented range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z
# (timestamp.proto), i.e. seconds in [-62135596800, 253402300799] and 0 <= nanos < 1e9.
TIMESTAMP_MIN_SECONDS = -62_135_596_800
TIMESTAMP_MAX_SECONDS = 253_402_300_799

def parse_timestamp(ts: Any, field_path: str) -> dt.datetime:
    """A google.protobuf.Timestamp → timezone-aware UTC datetime (microsecond precision).

    Raises InvalidArgument naming `field_path` when `seconds` is outside
    0001-01-01..9999-12-31 or `nanos` is outside [0, 1e9) — the range documented in
    google/protobuf/timestamp.proto (protobuf's ToDatetime raises ValueError there, which
    would otherwise surface as INTERNAL).
    """
    seconds, nanos = int(ts.seconds), int(ts.nanos)
    if not TIMESTAMP_MIN_SECONDS <= seconds <= TIMESTAMP_MAX_SECONDS:
        raise InvalidArgument(
            field_path, "seconds must be within 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z "
            f"({TIMESTAMP_MIN_SECONDS}..{TIMESTAMP_MAX_SECONDS}; got {seconds})",
        )
    if not 0 <= nanos < 1_000_000_000:
        raise InvalidArgument(field_path, f"nanos must be within 0..999999999 (got {nanos})")
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds, microseconds=nanos // 1000)


# google.protobuf.Duration's documented range (duration.proto): seconds within ±315,576,000,000
# (about ±10,000 years), nanos within -999,999,999..+999,999,999, both of one sign when both are non-zero.
DURATION_MAX_SECONDS = 315_576_000_000
NANOS_PER_SECOND = 1_000_000_000


def parse_duration(d: Any, field_path: str) -> dt.timedelta:
    """A google.protobuf.Duration → datetime.timedelta (microsecond precision; nanos below a microsecond
    are dropped toward zero), the one Duration check of every request field.

    Raises InvalidArgument naming `field_path` when the Duration is not one duration.proto allows:
    `seconds` outside ±315,576,000,000, `nanos` outside ±999,999,999, or `seconds` and `nanos` of
    opposite signs (`{seconds: 5, nanos: -1}`). Callers check their own range (e.g. a lease's 1 s..30 min)
    on the result. The message names the limits and the two integers, never anything longer."""
    seconds, nanos = int(d.seconds), int(d.nanos)
    what = f"is not a valid google.protobuf.Duration (seconds {seconds}, nanos {nanos}): "
    if not -DURATION_MAX_SECONDS <= seconds <= DURATION_MAX_SECONDS:
        raise InvalidArgument(field_path, what + f"seconds must be within ±{DURATION_MAX_SECONDS}")
    if not -NANOS_PER_SECOND < nanos < NANOS_PER_SECOND:
        raise InvalidArgument(field_path, what + "nanos must be within ±999999999")
    if (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0):
        raise InvalidArgument(field_path, what + "seconds and nanos must have the same sign")
    return dt.timedelta(seconds=seconds, microseconds=int(nanos / 1000))


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def timestamp_into(into: Any, t: dt.datetime) -> None:
    """Set google.protobuf.Timestamp `into` to `t` (a naive `t` is UTC), as `Timestamp.FromDatetime`
    does; a timezone-aware `t` (every time read from PostgreSQL) by timedelta arithmetic, ≈ 0.3 µs
    where FromDatetime (calendar.timegm of a UTC time tuple) takes ≈ 4 µs: two of them on every
    rating and message answered."""
    if t.tzinfo is None:
        into.FromDatetime(t)
        return
    d = t - _EPOCH
    into.seconds = d.days * 86400 + d.seconds
    into.nanos = d.microseconds * 1000


def check_text(value: str, field_path: str, max_chars: int | None = None, required: bool = False) -> str:
    """Text policy for user-supplied strings (case F12): NUL bytes are rejected with
    INVALID_ARGUMENT naming the field (PostgreSQL `text` cannot store U+0000, and silently
    dropping bytes of the owner's words is worse); over `max_chars` Unicode code points →
    INVALID_ARGUMENT naming the limit. Never truncated behind an OK.
    """
    if required and not value.strip():
        raise InvalidArgument(field_path, "must not be empty")
    if "\x00" in value:
        raise InvalidArgument(field_path, "must not contain NUL (U+0000) characters", reason="NUL_CHARACTER")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidArgument(
            field_path, f"is {len(value)} characters; the limit is {max_chars}", reason="TOO_LONG",
            limit=str(max_chars),
        )
    return value


# Characters a one-line label must not hold: C0/C1 controls (U+0000-001F, U+007F-009F), the bidi
# embeddings, overrides and isolates that reorder what a reader sees (U+202A-202E, U+2066-2069; Unicode
# UAX #9 and the "Trojan Source" attack, CVE-2021-42574), line/paragraph separators and noncharacters.
UNSAFE_IN_LABEL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufdd0-\ufdef\ufffe\uffff]")


def check_label(value: str, field_path: str, max_chars: int, required: bool = False) -> str:
    """check_text for a one-line name others see in lists (an agent's display name): also
    INVALID_ARGUMENT naming the field (reason UNSAFE_CHARACTER, with the first offending code point
    as U+XXXX, never the value) for a control, bidi reordering, separator or noncharacter code point:
    a name "x" U+202E "gnp.exe" would read as "xexe.png" in every list."""
    check_text(value, field_path, max_chars, required)
    bad = UNSAFE_IN_LABEL.search(value)
    if bad is not None:
        raise InvalidArgument(field_path, f"must not contain control or bidi formatting characters "
                              f"(found U+{ord(bad.group()):04X})", reason="UNSAFE_CHARACTER")
    return value


def request_fingerprint(request: Any, request_id_field: str = "request_id") -> bytes:
    """SHA-256 (32 bytes) of the request message's deterministic serialization without its
    request id: stored with an AIP-155 idempotency record so a reused request_id can be told
    apart from a retry of the same request."""
    copy = type(request)()
    copy.CopyFrom(request)
    copy.ClearField(request_id_field)
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).digest()


def check_same_request(stored_fingerprint: bytes | None, fingerprint: bytes | None,
                       field_path: str = "request_id") -> None:
    """INVALID_ARGUMENT naming `field_path` (reason REQUEST_ID_REUSED) when a request id comes back
    with a different request (AIP-155): the fingerprints differ, or either is missing (a request id
    without a fingerprint cannot be told from a reuse)."""
    if stored_fingerprint is None or fingerprint is None or bytes(stored_fingerprint) != fingerprint:
        raise InvalidArgument(field_path, "was already used for a different request; use a new request_id",
                              reason="REQUEST_ID_REUSED")
