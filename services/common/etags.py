"""AIP-154 etags of every service: one format, one parser.

An etag names one state of one row: its version and its *incarnation* — the row's id, which a row
deleted and created again under the same key (a rating put again after DeleteRating) does not keep.
So an etag is never reused for a different state of the same key (issue 25: a rating deleted and put
again started back at version 1, and a stale tab holding the deleted rating's etag `"1"` passed the
compare-and-swap on the new one: ABA across a delete).

Form: a strong validator (RFC 9110 §8.8.3), `"<opaque>"`, the opaque part base64url of
`<version>:<incarnation>`; clients compare it, send it back, and must not build or parse it. On input
the weak form `W/"<opaque>"` of one of ours is taken as the same validator (AIP-154 lets a service
decide; ours are always strong, so the compare is strong either way). Anything else — a bare or
unquoted value, a number, an etag of another format — is not an etag this service issued:
INVALID_ARGUMENT naming the field.
"""
from __future__ import annotations

import base64
import binascii
import re
from typing import NamedTuple

from services.common.errors import InvalidArgument

_QUOTED = re.compile(r'(?:W/)?"([A-Za-z0-9_-]{1,200})"')
_INNER = re.compile(r"([0-9]{1,18}):([A-Za-z0-9_-]{1,128})")


class Etag(NamedTuple):
    """What an etag names: the row's version and its incarnation (the row id)."""

    version: int
    incarnation: str


def etag(version: int, incarnation: str) -> str:
    """The etag of `version` of the row `incarnation` (its id): a strong validator."""
    raw = base64.urlsafe_b64encode(f"{version}:{incarnation}".encode()).decode().rstrip("=")
    return f'"{raw}"'


def read_etag(value: str) -> Etag | None:
    """What an etag names, None when it is not one this format produces."""
    m = _QUOTED.fullmatch(value.strip())
    if m is None:
        return None
    raw = m.group(1)
    try:
        inner = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    n = _INNER.fullmatch(inner)
    return Etag(int(n.group(1)), n.group(2)) if n is not None else None


def parse_etag(value: str, field_path: str) -> Etag:
    """What an etag names; INVALID_ARGUMENT naming `field_path` for anything else (a bare number
    included)."""
    got = read_etag(value)
    if got is None:
        raise InvalidArgument(field_path, "is not an etag this service issued (send back the etag you read)")
    return got


def etag_matches(given: str, version: int, incarnation: str) -> bool:
    """True when `given` is empty (no precondition) or names `version` of `incarnation`; False for any
    other (a stale etag, or one of a deleted row of the same key: ABORTED)."""
    return not given or read_etag(given) == Etag(version, incarnation)
