"""A rating (PutRating … CopyRatings): its key, the rating, PutRating's validated write and the
store's answer."""
from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from services.common.etags import Etag
from services.feedback.model.enums import Category, RatingOrigin, RatingScope, RatingSentiment


@dataclass(frozen=True, slots=True)
class RatingKey:
    """What a rating is unique by, for one owner."""

    conversation: str
    turn_index: int
    scope: RatingScope
    aspect: str
    artifact_id: str


@dataclass(frozen=True, slots=True)
class Rating:
    id: str
    key: RatingKey
    owner: str
    sentiment: RatingSentiment
    category: Category
    note: str
    origin: RatingOrigin
    message: str
    version: int
    create_time: dt.datetime
    update_time: dt.datetime
    # Issue 13: why (a sorted set of slugs) and the answer of a multi-state question ('' = none).
    reasons: tuple[str, ...] = ()
    choice: str = ""

    @property
    def name(self) -> str:
        return f"ratings/{self.id}"


@dataclass(frozen=True, slots=True)
class RatingWrite:
    """PutRating's values; `owned`: the fields this call owns (AIP-134 mask: sentiment, category, note,
    reasons, choice)."""

    sentiment: RatingSentiment
    category: Category
    note: str
    owned: frozenset[str]
    message: str
    reasons: tuple[str, ...] = ()
    choice: str = ""


@dataclass(frozen=True, slots=True)
class PutOutcome:
    """One PutRating statement's answer: `written` the rating it wrote (None: nothing written); `seen`:
    the request id was used before (then `prior_fingerprint` is that request's)."""

    written: Rating | None
    seen: bool
    prior_fingerprint: bytes | None


@dataclass(frozen=True, slots=True)
class RatingPut:
    """A PutRating request, validated: the key, the values, the etag precondition (`version` None: an
    upsert; else strict compare-and-swap against it) and the AIP-155 request id with its fingerprint."""

    key: RatingKey
    write: RatingWrite
    version: Etag | None = None  # the etag's version and incarnation (the rating's id)
    etag: str = ""
    request_id: uuid.UUID | None = None
    fingerprint: bytes | None = None


@dataclass(frozen=True, slots=True)
class RatingFilter:
    """ListRatings' filters (0 / '' / None = not applied)."""

    sentiment: RatingSentiment = RatingSentiment.UNSPECIFIED
    reason: str = ""
    start_time: dt.datetime | None = None
    origin: RatingOrigin = RatingOrigin.UNSPECIFIED
