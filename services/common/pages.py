"""Page tokens of every List RPC (AIP-158): one helper, one binding to the request's filters.

A token is the URL-safe base64 of a small JSON object: the keyset position of the last item returned
(fields chosen by the list, e.g. `{"t": …, "i": …}`) plus `f`, a digest of the filters it was issued
for. Tokens are opaque but not signed: a client can decode, edit and send one back, so `read` checks
the digest and every caller checks each position value (`page_token_int` / `_text` / `_us` /
`page_token_time`) before it reaches SQL — a forged token is INVALID_ARGUMENT naming `page_token`,
never INTERNAL. A token sent with other filters is INVALID_ARGUMENT too (start again without one).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.message import Message

from services.common.errors import InvalidArgument
from services.common.ids import decode_page_token, encode_page_token

FIELD = "page_token"
# A page's items stop before their encoded size passes this (AIP-158 lets a page be shorter than
# page_size): below gRPC's 4 MiB default receive limit of every client, with room for the token.
RESPONSE_MAX_BYTES = 3 * 1024 * 1024
NOT_OURS = "is not a token this service issued"


def fit(items: Sequence[Message], max_bytes: int | None = None) -> int:
    """How many of a page's `items` (protos, in page order) fit in one response of at most `max_bytes`
    (default RESPONSE_MAX_BYTES, read per call; at least one: a single item is bounded by the service's
    own field limits). The caller issues the next page's token after the last item kept, so every
    advertised page size works. Every List RPC applies it."""
    max_bytes = RESPONSE_MAX_BYTES if max_bytes is None else max_bytes
    total = 0
    for i, m in enumerate(items):
        total += m.ByteSize() + 8  # the field's tag and length prefix
        if total > max_bytes and i > 0:
            return i
    return len(items)


def filters_digest(filters: Any) -> str:
    """A short digest (16 hex) of a list call's filters: any JSON-able value (datetimes as ISO 8601)."""
    raw = json.dumps(filters, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def issue(position: Mapping[str, Any], filters: Any) -> str:
    """The next page's token: `position` (the last item's sort key) bound to `filters`."""
    return encode_page_token({**position, "f": filters_digest(filters)})


def read(token: str, filters: Any) -> dict[str, Any] | None:
    """The position a token carries; None for no token. INVALID_ARGUMENT naming `page_token` when it
    is not one of ours or was issued for other filters."""
    pos = decode_page_token(token, FIELD)
    if pos is None:
        return None
    if pos.get("f") != filters_digest(filters):
        raise InvalidArgument(FIELD, "was issued for different filters; start again without a page_token")
    return pos


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
