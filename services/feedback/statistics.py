"""Statistics and the operator feed, the use case (operator scope `feedback:admin`; every owner).

Both read USER-origin ratings only (a BRANCH_COPY rating is the same judgement again, not a new one).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from services.feedback import domain
from services.feedback.model import Rating, RecentFilter, Report, Statistics
from services.feedback.repository import Repository


@dataclass(frozen=True)
class RecentItem:
    """One entry of the feed: a rating or a report, at `time` (a rating's update_time, a report's
    create_time)."""

    time: dt.datetime
    id: str
    rating: Rating | None = None
    report: Report | None = None


class Stats:
    def __init__(self, repo: Repository, clock: Callable[[], dt.datetime]):
        self._repo = repo
        self._clock = clock

    async def window(self, window_days: int) -> Statistics:
        """Counts over the window of `window_days` UTC days ending today (0 → 30; 1..365, else
        INVALID_ARGUMENT `window_days`); the trend has one entry per day, zeros included."""
        days = domain.check_window_days(window_days)
        today = self._clock().date()
        since = dt.datetime.combine(today - dt.timedelta(days=days - 1), dt.time(), dt.UTC)
        aspects, categories, daily = await self._repo.stats(since)
        return Statistics(tuple(aspects), tuple(categories), tuple(domain.fill_trend(daily, today, days)))

    async def recent(self, f: RecentFilter, after: tuple[dt.datetime, str] | None, size: int) -> list[RecentItem]:
        """USER ratings and reports of every owner, newest first (time, id), at most `size` + 1 (one more
        tells the caller there is a next page). Rating-only filters (scope, aspect, rating sentiment,
        reason, choice) leave reports out; `negative_only` keeps NEGATIVE ratings and BAD reports; `text` matches the
        note / the body (case-insensitive)."""
        rating_only = bool(f.scope or f.aspect or f.sentiment or f.reason or f.choice)
        ratings, reports = await self._repo.recent(f, after, size + 1, ratings=True, reports=not rating_only)
        items = [RecentItem(r.update_time, r.id, rating=r) for r in ratings]
        items += [RecentItem(r.create_time, r.id, report=r) for r in reports]
        items.sort(key=lambda x: (x.time, x.id), reverse=True)
        return items[: size + 1]
