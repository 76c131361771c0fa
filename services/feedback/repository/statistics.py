"""Statistics beyond the per-aspect totals (issue 13): the per-dimension daily series and the
completion funnel. Every read counts USER-origin ratings only (a BRANCH_COPY never moves a figure)
updated since `:since`, and reports created since then; enum values bound by name.
"""
from __future__ import annotations

import datetime as dt

import asyncpg

from services.common.db import NamedSQL
from services.feedback.repository.ratings import _RATING_COUNTS, _SENTIMENT_COUNTS
from services.feedback.model import AspectCount, DailyCount, RatingOrigin, RatingScope, RatingSentiment

# Per (scope, aspect, UTC day): the split of that day's ratings (hourly rollups, migration 0010).
DIMENSION_DAYS = NamedSQL(f"""{_RATING_COUNTS}
SELECT scope, aspect, (t AT TIME ZONE 'UTC')::date AS day, {_SENTIMENT_COUNTS}
FROM c GROUP BY 1, 2, 3 HAVING sum(n) > 0""")

# Conversations (conversation, user) with any USER rating or report in the window (migration 0012):
# those active after the window's first hour from `conversation_activity`, plus those whose latest
# activity is in that first, partial hour and falls after :since (read from the rows).
ENGAGED = NamedSQL("""
SELECT (SELECT count(*) FROM conversation_activity
        WHERE last_hour > date_trunc('hour', :since::timestamptz, 'UTC'))
     + (SELECT count(*) FROM (
            SELECT conversation, owner FROM ratings
            WHERE origin = :user_origin AND update_time >= :since
              AND update_time < date_trunc('hour', :since::timestamptz, 'UTC') + interval '1 hour'
            UNION
            SELECT instance, owner FROM feedback
            WHERE create_time >= :since AND instance <> ''
              AND create_time < date_trunc('hour', :since::timestamptz, 'UTC') + interval '1 hour'
        ) AS p JOIN conversation_activity a USING (conversation, owner)
        WHERE a.last_hour = date_trunc('hour', :since::timestamptz, 'UTC'))""")

# Each answered conversation's latest completion choice (by update_time, then turn index), counted
# (`latest_choices`, migration 0012: the latest is in the window exactly when some choice is).
LATEST_STATES = NamedSQL("""
SELECT choice, count(*) AS count FROM latest_choices
WHERE aspect = :aspect AND update_time >= :since
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
