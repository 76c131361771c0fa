"""The ratings and statistics part of the feedback model (see `model.py`, which re-exports it): frozen
dataclasses of ratings, PutRating's write, the operator feed's filter and the statistics' counts."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from services.feedback.enums import Category, RatingOrigin, RatingScope, RatingSentiment


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
class RecentFilter:
    """ListRecentFeedback's filters (0 / '' = not applied)."""

    scope: RatingScope = RatingScope.UNSPECIFIED
    aspect: str = ""
    sentiment: RatingSentiment = RatingSentiment.UNSPECIFIED
    category: Category = Category.UNSPECIFIED
    text: str = ""
    negative_only: bool = False
    reason: str = ""
    choice: str = ""


# ---------------------------------------------------------------- statistics
@dataclass(frozen=True, slots=True)
class AspectCount:
    scope: RatingScope
    aspect: str
    total: int
    positive: int
    neutral: int
    negative: int


@dataclass(frozen=True, slots=True)
class DailyCount:
    day: dt.date
    positive: int = 0
    neutral: int = 0
    negative: int = 0
    reports: int = 0


@dataclass(frozen=True, slots=True)
class Statistics:
    """GetFeedbackStats: per-aspect rating counts, reports per category, one entry per UTC day."""

    aspects: tuple[AspectCount, ...]
    categories: tuple[tuple[Category, int], ...]
    trend: tuple[DailyCount, ...]

    @property
    def total_ratings(self) -> int:
        return sum(a.total for a in self.aspects)

    @property
    def negative_ratings(self) -> int:
        return sum(a.negative for a in self.aspects)

    @property
    def total_reports(self) -> int:
        return sum(n for _, n in self.categories)
