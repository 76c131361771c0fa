"""Statistics and the operator feed (GetFeedbackStats, ListRecentFeedback): the feed's filter and
entries, per-aspect and per-day counts, the window's dimensions, funnel and headline words."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from services.feedback.model.enums import Category, RatingScope, RatingSentiment
from services.feedback.model.evaluation import EvaluationCount
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report


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
    reports_only: bool = False


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


@dataclass(frozen=True)
class Dimension:
    """One dimension (scope + aspect): its sentiment split and one DailyCount per day of the window."""

    count: AspectCount
    daily: tuple[DailyCount, ...]


@dataclass(frozen=True)
class Funnel:
    """Conversations (conversation, user) engaged → with a completion answer → marked complete, and
    the distribution of each answered conversation's latest choice (most frequent first)."""

    engaged: int = 0
    latest_state: tuple[tuple[str, int], ...] = ()
    complete_choice: str = ""

    @property
    def answered(self) -> int:
        return sum(n for _, n in self.latest_state)

    @property
    def complete(self) -> int:
        return next((n for c, n in self.latest_state if c == self.complete_choice), 0)


@dataclass(frozen=True)
class WindowStats:
    """GetFeedbackStats of issue 13: the per-aspect totals (`base`), each dimension's series, the
    completion funnel, the headline's likes / dislikes, the window used and its end."""

    base: Statistics
    dimensions: tuple[Dimension, ...]
    funnel: Funnel
    likes: int
    dislikes: int
    window_days: int
    end_time: dt.datetime
    # Issue 24: evaluations other systems sent, per (author kind, name), apart from the owners' figures.
    evaluations: tuple[EvaluationCount, ...] = ()


@dataclass(frozen=True)
class Vocabulary:
    """The words of the headline and the funnel: from the request, defaulting to the taxonomy's
    `stats` block (console/src/taxonomy.json). The server knows shapes, not words."""

    reaction_aspect: str = "reaction"
    completion_aspect: str = "task_completion"
    complete_choice: str = "complete"


@dataclass(frozen=True)
class RecentItem:
    """One entry of the feed: a rating or a report, at `time` (a rating's update_time, a report's
    create_time)."""

    time: dt.datetime
    id: str
    rating: Rating | None = None
    report: Report | None = None
