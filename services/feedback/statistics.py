"""Statistics and the operator feed, the use case (operator scope `feedback:admin`; every owner).

Both read USER-origin ratings only (evaluations other systems sent, issue 24, are counted apart, per
author kind and name, in `WindowStats.evaluations`) (a BRANCH_COPY rating is the same judgement again, not a new one;
editing a copy makes it the owner's own, USER, and it counts from then on).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from services.feedback import domain
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report
from services.feedback.model.statistics import (
    Dimension,
    Funnel,
    RecentFilter,
    RecentItem,
    Statistics,
    Vocabulary,
    WindowStats,
)
from services.feedback.repository.evaluations import EvaluationStore
from services.feedback.repository.statistics import StatisticsStore


class Stats:
    def __init__(self, repo: StatisticsStore, clock: Callable[[], dt.datetime],
                 evaluations: EvaluationStore | None = None):
        self._repo = repo
        self._clock = clock
        self._evaluations = evaluations

    async def window(self, window_days: int, vocabulary: Vocabulary = Vocabulary()) -> WindowStats:
        """Counts over the window of `window_days` UTC days ending today (0 → 30; 1..365, else
        INVALID_ARGUMENT `window_days`); the trend and each dimension's series have one entry per
        day, zeros included. The headline's likes / dislikes are `vocabulary.reaction_aspect`'s
        POSITIVE / NEGATIVE ratings; the funnel reads `completion_aspect`'s choices (issue 13)."""
        days = domain.check_window_days(window_days)
        now = self._clock()
        today = now.date()
        since = dt.datetime.combine(today - dt.timedelta(days=days - 1), dt.time(), dt.UTC)
        (aspects, categories, daily), per_day = await self._repo.window_counts(since)
        engaged, states = await self._repo.funnel(since, vocabulary.completion_aspect)
        dims = []
        for a in aspects:
            rows = [d for c, d in per_day if (c.scope, c.aspect) == (a.scope, a.aspect)]
            dims.append(Dimension(a, tuple(domain.fill_trend(rows, today, days))))
        reaction = [a for a in aspects if a.aspect == vocabulary.reaction_aspect]
        evaluations = tuple(await self._evaluations.counts(since)) if self._evaluations else ()
        return WindowStats(
            Statistics(tuple(aspects), tuple(categories), tuple(domain.fill_trend(daily, today, days))),
            tuple(dims), Funnel(engaged, tuple(states), vocabulary.complete_choice),
            likes=sum(a.positive for a in reaction), dislikes=sum(a.negative for a in reaction), window_days=days,
            end_time=now, evaluations=evaluations,
        )

    async def conversation_counts(self, owner: str, conversations: list[str]) -> list[tuple[str, int, int]]:
        """The caller's own figures (not an operator read): (conversation, reports, USER ratings) per
        distinct conversation, in the request's order; another owner's conversation counts zero."""
        return await self._repo.conversation_counts(owner, list(dict.fromkeys(conversations)))

    async def turn(self, user: str, conversation: str, turn_index: int) -> tuple[list[Rating], list[Report]]:
        """Everything `user` said about one turn: every rating (origin shown) and report (read-only)."""
        return await self._repo.turn_feedback(user, conversation, turn_index)

    async def recent(self, f: RecentFilter, after: tuple[dt.datetime, str] | None, size: int) -> list[RecentItem]:
        """USER ratings and reports of every owner, newest first (time, id), at most `size` + 1 (one more
        tells the caller there is a next page). Rating-only filters (scope, aspect, rating sentiment,
        reason, choice) leave reports out; `negative_only` keeps NEGATIVE ratings and BAD reports; `text` matches the
        note / the body (case-insensitive); `reports_only` leaves ratings out."""
        rating_only = bool(f.scope or f.aspect or f.sentiment or f.reason or f.choice)
        ratings, reports = await self._repo.recent(f, after, size + 1, ratings=not f.reports_only,
                                                   reports=not rating_only)
        items = [RecentItem(r.update_time, r.id, rating=r) for r in ratings]
        items += [RecentItem(r.create_time, r.id, report=r) for r in reports]
        items.sort(key=lambda x: (x.time, x.id), reverse=True)
        return items[: size + 1]
