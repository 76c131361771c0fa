"""Paging of every List RPC (AIP-158): page size, page tokens and the one read → fetch → fit → issue
block (`page`); and the one signer of every opaque position token (`issue` / `read` with a `purpose`:
page tokens, and the resume tokens of WatchFeedback and ExportDataset).

A page token (`issue` / `read`) is `<payload>.<mac>`: the URL-safe base64 of a small JSON object — the
keyset position of the last item returned (fields chosen by the list, e.g. `{"t": …, "i": …}`), `f`, a
digest of the filters it was issued for, and `c`, a digest of the caller's `sub` — and an HMAC-SHA256
(truncated to 128 bits) of the payload under the deployment's page-token key (`set_key`, from
`AGENTFEEDBACK_PAGE_TOKEN_KEY`, else derived from the HS256 JWT secret; see `auth.page_token_key`).
An edited or foreign token is INVALID_ARGUMENT naming `page_token` ("is not a token this service
issued"); one sent with other filters or by another caller is INVALID_ARGUMENT too (AIP-158: start
again without one). A resume token is the same shape under its own `purpose` (mixed into the MAC, so a
page token is never a resume token) with no filters: INVALID_ARGUMENT naming `resume_token` when edited
or foreign. ExportDataset's are bound to the caller too; WatchFeedback's are not (`bind_caller=False`:
webhook events carry them and an admin may hand a position to a consumer; every feed read is scoped to
its caller anyway). A token without a MAC (resume tokens were unsigned before) is refused with
its own message (`UNSIGNED`): no transition window, since accepting them would accept forgeries too.
Every caller still checks each position value (`page_token_int` / `_text` / `_us`
/ `page_token_time`) before it reaches SQL: a key that leaked must not make SQL errors INTERNAL.
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from services.common.errors import InvalidArgument
from services.common.ids import TIMESTAMP_MAX_SECONDS, TIMESTAMP_MIN_SECONDS

FIELD = "page_token"
# A page's items stop before their encoded size passes this (AIP-158 lets a page be shorter than
# page_size): below gRPC's 4 MiB default receive limit of every client, with room for the token.
RESPONSE_MAX_BYTES = 3 * 1024 * 1024
NOT_OURS = "is not a token this service issued"
# Longest id a page token may carry (ours are 32 hex characters; client-chosen ids are shorter).
PAGE_TOKEN_ID_MAX_CHARS = 128

Row = TypeVar("Row")
Item = TypeVar("Item", bound=Message)
Position = TypeVar("Position")


def page_size(value: int, default: int = 50, maximum: int = 1000, field_path: str = "page_size") -> int:
    """AIP-158: 0 → default, negative → INVALID_ARGUMENT, above maximum → maximum."""
    if value < 0:
        raise InvalidArgument(field_path, "must not be negative")
    return default if value == 0 else min(value, maximum)


def encode_page_token(position: Mapping[str, Any]) -> str:
    """An opaque keyset page token (the last row's sort key), never an offset (AIP-158)."""
    return base64.urlsafe_b64encode(json.dumps(position, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_page_token(token: str, field_path: str = FIELD) -> dict[str, Any] | None:
    """The JSON object a token carries; None for no token; INVALID_ARGUMENT naming `field_path` when
    it is not base64 of a JSON object."""
    if not token:
        return None
    try:
        out = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(out, dict):
            raise ValueError
        return out
    except (ValueError, json.JSONDecodeError):
        raise InvalidArgument(field_path, NOT_OURS) from None


# The deployment's key (`set_key`, at server start-up). Until set (a bare unit test of a list): a
# random key per process, so tokens still only round-trip within the process that issued them.
_key: bytes = secrets.token_bytes(32)
_MAC_BYTES = 16
PAGE = "page token"
FEED_RESUME = "feed resume token"
DATASET_RESUME = "dataset resume token"
# An unsigned token is one from before tokens were signed, or one re-encoded by hand: either way not
# ours, said as for any other token we did not issue, with the likely cause and the way out.
UNSIGNED = f"{NOT_OURS} (it is unsigned, as tokens were before they were signed); start again without one"


def set_key(key: bytes) -> None:
    """The HMAC key page tokens are signed with (every replica of a deployment must share it)."""
    global _key
    _key = key


def _mac(payload: str, purpose: str = PAGE) -> str:
    raw = hmac.new(_key, f"agentfeedback {purpose} v1\0".encode() + payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(raw[:_MAC_BYTES]).decode().rstrip("=")


def _caller_digest() -> str:
    """A digest (16 hex) of the RPC's caller (`sub` of the principal the auth interceptor set; '' when
    none, e.g. a store used directly)."""
    from services.common.auth import current_principal_or_none  # noqa: PLC0415 - auth imports settings

    p = current_principal_or_none()
    return hashlib.sha256(f"caller\0{p.sub if p else ''}".encode()).hexdigest()[:16]


def filters_digest(filters: Any) -> str:
    """A short digest (16 hex) of a list call's filters: any JSON-able value (datetimes as ISO 8601)."""
    raw = json.dumps(filters, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def issue(position: Mapping[str, Any], filters: Any, purpose: str = PAGE, bind_caller: bool = True) -> str:
    """The next page's (or stream position's) token: `position` (the last item's sort key; keys `f` and
    `c` are taken) bound to `filters` and (`bind_caller`) the caller, signed with the deployment's key
    for `purpose`."""
    caller = _caller_digest() if bind_caller else ""
    payload = encode_page_token({**position, "f": filters_digest(filters), "c": caller})
    return f"{payload}.{_mac(payload, purpose)}"


def read(token: str, filters: Any, purpose: str = PAGE, field_path: str = FIELD,
         bind_caller: bool = True) -> dict[str, Any] | None:
    """The position a token carries; None for no token. INVALID_ARGUMENT naming `field_path` when it
    is not one of ours (edited, signed with another key or for another `purpose`; unsigned: `UNSIGNED`),
    or was issued for other filters or to another caller."""
    if not token:
        return None
    payload, dot, mac = token.partition(".")
    if not dot:
        raise InvalidArgument(field_path, UNSIGNED if _is_json_object(payload) else NOT_OURS)
    if not hmac.compare_digest(mac.encode(), _mac(payload, purpose).encode()):
        raise InvalidArgument(field_path, NOT_OURS)
    pos = decode_page_token(payload, field_path)
    if pos is None:
        raise InvalidArgument(field_path, NOT_OURS)
    if pos.get("c") != (_caller_digest() if bind_caller else ""):
        raise InvalidArgument(field_path, f"was issued to another caller; start again without a {field_path}")
    if pos.get("f") != filters_digest(filters):
        raise InvalidArgument(field_path, f"was issued for different filters; start again without a {field_path}")
    return pos


def _is_json_object(payload: str) -> bool:
    try:
        return decode_page_token(payload) is not None
    except InvalidArgument:
        return False


def fit(items: Sequence[Message], max_bytes: int | None = None) -> int:
    """How many of a page's `items` (protos, in page order) fit in one response of at most `max_bytes`
    (default RESPONSE_MAX_BYTES, read per call; at least one: a single item is bounded by the service's
    own field limits). The next page's token is issued after the last item kept, so every advertised
    page size works."""
    max_bytes = RESPONSE_MAX_BYTES if max_bytes is None else max_bytes
    total = 0
    for i, m in enumerate(items):
        total += m.ByteSize() + 8  # the field's tag and length prefix
        if total > max_bytes and i > 0:
            return i
    return len(items)


@dataclass(frozen=True, slots=True)
class Page(Generic[Row, Item]):
    """One page: the rows kept, their protos (same order) and the next page's token ('' on the last)."""

    rows: Sequence[Row]
    items: list[Item]
    next_page_token: str


async def page(token: str, size: int, filters: Any, position: Callable[[dict[str, Any]], Position],
               fetch: Callable[[Position | None, int], Awaitable[Sequence[Row]]], to_pb: Callable[[Row], Item],
               key: Callable[[Row], Mapping[str, Any]]) -> Page[Row, Item]:
    """The List block every List RPC runs: read `token` (bound to `filters`; `position` checks its
    values), `fetch(after, size)` (at most `size` + 1 rows: one more says there is a next page), turn
    the first `size` into protos, keep those that `fit` one response, and issue the token after the
    last kept (`key(row)`, its keyset position). `size` comes from `page_size`."""
    pos = read(token, filters)
    got = await fetch(position(pos) if pos is not None else None, size)
    items = [to_pb(r) for r in got[:size]]
    n = fit(items)
    return Page(got[:n], items[:n], issue(key(got[n - 1]), filters) if len(got) > n else "")


def page_token_int(value: Any, low: int, high: int, field_path: str = FIELD) -> int:
    """A whole number read back from a page token, within [low, high] (INVALID_ARGUMENT otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(field_path, NOT_OURS)
    return value


def page_token_us(value: Any, field_path: str = FIELD) -> int:
    """Microseconds since the epoch read back from a page token: within google.protobuf.Timestamp's range."""
    return page_token_int(value, TIMESTAMP_MIN_SECONDS * 10**6, TIMESTAMP_MAX_SECONDS * 10**6, field_path)


def page_token_text(value: Any, field_path: str = FIELD) -> str:
    """An id (or other key text) read back from a page token: a string of at most PAGE_TOKEN_ID_MAX_CHARS
    characters without NUL (PostgreSQL text cannot hold NUL)."""
    if not isinstance(value, str) or len(value) > PAGE_TOKEN_ID_MAX_CHARS or "\x00" in value:
        raise InvalidArgument(field_path, NOT_OURS)
    return value


def page_token_time(value: Any) -> dt.datetime:
    """An ISO 8601 time read back from a page token, as an aware UTC datetime; INVALID_ARGUMENT for
    anything else — naive, or outside year 1..9999 once in UTC (PostgreSQL would refuse it)."""
    try:
        parsed = dt.datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError("no UTC offset")
        return parsed.astimezone(dt.UTC)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgument(FIELD, NOT_OURS) from None


def time_id(pos: Mapping[str, Any]) -> tuple[dt.datetime, str]:
    """The (time, id) keyset of a `time_id_key` position, each value checked."""
    return page_token_time(pos.get("t")), page_token_text(pos.get("i"))


def time_id_key(time: dt.datetime, id_: str) -> dict[str, str]:
    """The position of a list sorted by (time, id): `{"t": ISO 8601, "i": id}`."""
    return {"t": time.isoformat(), "i": id_}
