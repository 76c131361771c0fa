"""AIP-154 etags of every service: one format, one parser.

An etag is the row's version as a strong validator, `"<version>"`. On input we also accept its weak
form `W/"<version>"` and the bare version; ASCII digits only (str.isdigit also takes '²' or '٣'), at
most 18 of them (a PostgreSQL bigint holds 10^18).
"""
from __future__ import annotations

import re

from services.common.errors import InvalidArgument

_ETAG = re.compile(r'(?:W/)?"([0-9]{1,18})"|([0-9]{1,18})')


def etag(version: int) -> str:
    """The etag of a row version (a strong validator: the quoted version number)."""
    return f'"{version}"'


def version_of(value: str) -> int | None:
    """The version an etag names, None when it is not one this format produces."""
    m = _ETAG.fullmatch(value.strip())
    return int(m.group(1) or m.group(2)) if m is not None else None


def parse_etag(value: str, field_path: str) -> int:
    """The version an etag names; INVALID_ARGUMENT naming `field_path` for anything else."""
    version = version_of(value)
    if version is None:
        raise InvalidArgument(field_path, "is not an etag this service issued")
    return version


def etag_matches(given: str, version: int) -> bool:
    """True when `given` is empty (no precondition) or names `version`; False for any other value
    (a stale or foreign etag is a failed precondition, ABORTED)."""
    return not given or version_of(given) == version
