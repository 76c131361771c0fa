"""Statistics beyond the per-aspect totals (issue 13): the per-dimension daily series and the
completion funnel. Every read counts USER-origin ratings only (a BRANCH_COPY never moves a figure)
updated since `:since`, and reports created since then; enum values bound by name.
"""
from __future__ import annotations

import datetime as dt

import asyncpg

from services.common.db import NamedSQL
from services.feedback.model import AspectCount, DailyCount, RatingOrigin, RatingScope, RatingSentiment

# Per (scope, aspect, UTC day): the split of that day's ratings.
DIMENSION_DAYS = NamedSQL("""
SELECT scope, aspect, (update_time AT TIME ZONE 'UTC')::date AS day,
    count(*) FILTER (WHERE sentiment = :positive) AS positive,
    count(*) FILTER (WHERE sentiment = :neutral) AS neutral,
    count(*) FILTER (WHERE sentiment = :negative) AS negative
FROM ratings WHERE origin = :user_origin AND update_time >= :since
GROUP BY 1, 2, 3""")

# Conversations (conversation, user) with any USER rating or report in the window.
ENGAGED = NamedSQL("""
SELECT count(*) FROM (
    SELECT conversation, owner FROM ratings WHERE origin = :user_origin AND update_time >= :since
    UNION
    SELECT instance, owner FROM feedback WHERE create_time >= :since AND instance <> ''
) AS engaged""")

# Each answered conversation's latest completion choice (by update_time, then turn index), counted.
LATEST_STATES = NamedSQL("""
SELECT choice, count(*) AS count FROM (
    SELECT DISTINCT ON (conversation, owner) choice FROM ratings
    WHERE origin = :user_origin AND update_time >= :since AND aspect = :aspect AND choice <> ''
    ORDER BY conversation, owner, update_time DESC, turn_index DESC
) AS latest
GROUP BY choice ORDER BY count DESC, choice""")

_NAMED = {"user_origin": RatingOrigin.USER, "positive": RatingSentiment.POSITIVE,
          "neutral": RatingSentiment.NEUTRAL, "negative": RatingSentiment.NEGATIVE}


class StatisticsStore:
    """The funnel and per-dimension reads over `self.pool` (mixed into `Repository`)."""

    pool: asyncpg.Pool

    async def dimension_days(self, since: dt.datetime) -> list[tuple[AspectCount, DailyCount]]:
        """(dimension with that day's counts, the day's counts) per dimension and UTC day with ratings."""
        got = await self.pool.fetch(*DIMENSION_DAYS.bind({**_NAMED, "since": since}))
        out = []
        for r in got:
            total = r["positive"] + r["neutral"] + r["negative"]
            out.append((AspectCount(RatingScope(r["scope"]), r["aspect"], total, r["positive"], r["neutral"],
                                    r["negative"]),
                        DailyCount(r["day"], r["positive"], r["neutral"], r["negative"])))
        return out

    async def funnel(self, since: dt.datetime, completion_aspect: str) -> tuple[int, list[tuple[str, int]]]:
        """(conversations engaged, [(latest completion choice, conversations)] most frequent first)."""
        values = {**_NAMED, "since": since, "aspect": completion_aspect}
        async with self.pool.acquire() as conn:
            engaged = await conn.fetchval(*ENGAGED.bind(values))
            states = await conn.fetch(*LATEST_STATES.bind(values))
        return engaged, [(s["choice"], s["count"]) for s in states]
