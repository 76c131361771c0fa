"""What a judgement can hold beyond a sentiment (issue 13): `reasons` (a set of slugs) and `choice`
(one slug answering a multi-state question). The server checks shape only; the vocabulary lives in
console/src/taxonomy.json. Each is its own PutRating mask path (`domain.rating_mask`), so a control
owning one never clobbers another (AIP-134). Values are never echoed in errors (only their position).
"""
from __future__ import annotations

from collections.abc import Iterable

from services.common.errors import InvalidArgument
from services.feedback.domain import ASPECT_SLUG

MAX_REASONS = 16


def check_reasons(reasons: Iterable[str], field_path: str = "rating.reasons") -> tuple[str, ...]:
    """The reasons as stored: sorted, each a slug `[a-z][a-z0-9_]{0,63}`, at most 16, no duplicates.
    INVALID_ARGUMENT naming `field_path` otherwise."""
    rs = list(reasons)
    if len(rs) > MAX_REASONS:
        raise InvalidArgument(field_path, f"holds at most {MAX_REASONS} reasons", reason="TOO_MANY",
                              limit=str(MAX_REASONS))
    for i, r in enumerate(rs):
        if not ASPECT_SLUG.match(r):
            raise InvalidArgument(field_path, f"entry {i} must be a slug [a-z][a-z0-9_]{{0,63}}")
    if len(set(rs)) != len(rs):
        raise InvalidArgument(field_path, "must not repeat a reason (it is a set)")
    return tuple(sorted(rs))


def check_slug(value: str, field_path: str) -> str:
    """'' (none) or a slug: a rating's `choice`, a feed's `reason` / `choice` filter, a stats word."""
    if value and not ASPECT_SLUG.match(value):
        raise InvalidArgument(field_path, "must be empty or a slug [a-z][a-z0-9_]{0,63}")
    return value
