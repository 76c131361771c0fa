"""Statistics beyond the per-aspect totals (issue 13): the per-dimension daily series and the
completion funnel. Every read counts USER-origin ratings only (a BRANCH_COPY never moves a figure)
updated since `:since`, and reports created since then; enum values bound by name.
"""
from __future__ import annotations

import datetime as dt

import asyncpg

from services.common.db import NamedSQL
from services.feedback.repository.ratings import _RATING_COUNTS, _SENTIMENT_COUNTS, REPORT_DAYS
from services.feedback.model import AspectCount, Category, DailyCount, RatingOrigin, RatingScope, RatingSentiment

# Per (scope, aspect, UTC day): the split of that day's ratings (hourly rollups, migration 0010). The
# per-aspect totals and the daily trend are its sums (one pass over the rollups instead of three).
DIMENSION_DAYS = NamedSQL(f"""{_RATING_COUNTS}
SELECT scope, aspect, (t AT TIME ZONE 'UTC')::date AS day, sum(n)::bigint AS total, {_SENTIMENT_COUNTS}
FROM c GROUP BY 1, 2, 3 HAVING sum(n) > 0 ORDER BY 1, 2, 3""")

# Conversations (conversation, user) with any USER rating or report in the window (migrations 0012,
# 0016): those whose latest activity is after the window's first hour, summed from the hourly counts
# of `conversation_activity` (≤ 24 × days × 16 counter rows, not a row per conversation), plus those
# whose latest activity is in that first, partial hour and falls after :since (read from the rows).
ENGAGED = NamedSQL("""
SELECT (SELECT coalesce(sum(n), 0)::bigint FROM activity_hour_counts
        WHERE hour >= date_trunc('hour', :since::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour')
     + (SELECT count(*) FROM (
            SELECT conversation, owner FROM ratings
            WHERE origin = :user_origin AND update_time >= :since
              AND update_time < date_trunc('hour', :since::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour'
            UNION
            SELECT instance, owner FROM feedback
            WHERE create_time >= :since AND instance <> ''
              AND create_time < date_trunc('hour', :since::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour'
        ) AS p JOIN conversation_activity a USING (conversation, owner)
        WHERE a.last_hour = date_trunc('hour', :since::timestamptz, 'UTC'))""")

# Each answered conversation's latest completion choice (by update_time, then turn index), counted
# (`latest_choices`, migration 0012: the latest is in the window exactly when some choice is): whole
# hours after the first from their hourly counts (migration 0016), the first, partial hour from the rows.
LATEST_STATES = NamedSQL("""
WITH c AS (
    SELECT choice, n FROM latest_choice_hour_counts
    WHERE aspect = :aspect AND hour >= date_trunc('hour', :since::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour'
    UNION ALL
    SELECT choice, 1 FROM latest_choices
    WHERE aspect = :aspect AND update_time >= :since
      AND update_time < date_trunc('hour', :since::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour')
SELECT choice, sum(n)::bigint AS count FROM c
GROUP BY choice HAVING sum(n) > 0 ORDER BY count DESC, choice""")

_NAMED = {"user_origin": RatingOrigin.USER, "positive": RatingSentiment.POSITIVE,
          "neutral": RatingSentiment.NEUTRAL, "negative": RatingSentiment.NEGATIVE}


def _dimensions(got: list[asyncpg.Record]) -> list[tuple[AspectCount, DailyCount]]:
    out = []
    for r in got:
        total = r["positive"] + r["neutral"] + r["negative"]
        out.append((AspectCount(RatingScope(r["scope"]), r["aspect"], total, r["positive"], r["neutral"], r["negative"]),
                    DailyCount(r["day"], r["positive"], r["neutral"], r["negative"])))
    return out


class StatisticsStore:
    """The funnel and per-dimension reads over `self.pool` (mixed into `Repository`)."""

    pool: asyncpg.Pool

    async def dimension_days(self, since: dt.datetime) -> list[tuple[AspectCount, DailyCount]]:
        """(dimension with that day's counts, the day's counts) per dimension and UTC day with ratings,
        ordered by scope, aspect (the database's collation), day."""
        return _dimensions(await self.pool.fetch(*DIMENSION_DAYS.bind({**_NAMED, "since": since})))

    async def window_counts(self, since: dt.datetime) -> tuple[
            tuple[list[AspectCount], list[tuple[Category, int]], list[DailyCount]], list[tuple[AspectCount, DailyCount]]]:
        """(`stats(since)`, `dimension_days(since)`) from two statements: the per-aspect totals and the
        rating trend are sums of the per-dimension days, the categories those of the per-category days."""
        async with self.pool.acquire() as conn:
            dims = await conn.fetch(*DIMENSION_DAYS.bind({**_NAMED, "since": since}))
            reports = await conn.fetch(REPORT_DAYS, since)
        totals: dict[tuple[int, str], list[int]] = {}  # in the query's (scope, aspect) order
        for r in dims:
            t = totals.setdefault((r["scope"], r["aspect"]), [0, 0, 0, 0])
            for i, k in enumerate(("total", "positive", "neutral", "negative")):
                t[i] += r[k]
        aspects = [AspectCount(RatingScope(scope), aspect, *t) for (scope, aspect), t in totals.items()]
        categories: dict[int, int] = {}
        for r in reports:
            categories[r["category"]] = categories.get(r["category"], 0) + r["count"]
        per_day = _dimensions(dims)
        daily = [d for _, d in per_day] + [DailyCount(r["day"], reports=r["count"]) for r in reports]
        return (aspects, [(Category(c), n) for c, n in categories.items()], daily), per_day

    async def stats(self, since: dt.datetime) -> tuple[list[AspectCount], list[tuple[Category, int]], list[DailyCount]]:
        """(aspects by scope, aspect; categories by category; per-day rows — several per day, unsummed)
        of USER ratings and reports since `since`."""
        return (await self.window_counts(since))[0]

    async def funnel(self, since: dt.datetime, completion_aspect: str) -> tuple[int, list[tuple[str, int]]]:
        """(conversations engaged, [(latest completion choice, conversations)] most frequent first)."""
        values = {**_NAMED, "since": since, "aspect": completion_aspect}
        async with self.pool.acquire() as conn:
            engaged = await conn.fetchval(*ENGAGED.bind(values))
            states = await conn.fetch(*LATEST_STATES.bind(values))
        return engaged, [(s["choice"], s["count"]) for s in states]
