"""Statistics and the operator feed: the per-dimension daily series, the completion funnel, the feed
of every owner's ratings and reports and the per-turn view. Every read counts USER-origin ratings only (a BRANCH_COPY never moves a figure)
updated since `:since`, and reports created since then; enum values bound by name.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.common.db import NamedSQL, fetch_custom_plan, like_pattern
from services.feedback.model.enums import Category, RatingOrigin, RatingScope, RatingSentiment, Sentiment, SnapshotSource
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report
from services.feedback.model.statistics import AspectCount, DailyCount, RecentFilter
from services.feedback.repository import rows, text_search
from services.feedback.repository.ratings import _RATING_COUNTS, _SENTIMENT_COUNTS, RATING_COLUMNS, REPORT_DAYS
from services.feedback.repository.reports import FEEDBACK_COLUMNS

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

# The operator feed (ListRecentFeedback): every owner's USER ratings and reports, newest first.
_RECENT_RATINGS_WHERE = """origin = :user_origin
  AND (:scope::smallint = 0 OR scope = :scope) AND (:aspect = '' OR aspect = :aspect)
  AND (:sentiment::smallint = 0 OR sentiment = :sentiment)
  AND (:category::smallint = 0 OR category = :category)
  AND (NOT :negative_only OR sentiment = :negative)
  AND (:reason = '' OR reasons @> ARRAY[:reason::text]) AND (:choice = '' OR choice = :choice)
  AND (:after_time::timestamptz IS NULL OR (update_time, id) < (:after_time, :after_id))"""
RECENT_RATINGS = NamedSQL(f"""
SELECT {RATING_COLUMNS} FROM ratings WHERE {_RECENT_RATINGS_WHERE}
ORDER BY update_time DESC, id DESC LIMIT :limit""")

_RECENT_FEEDBACK_WHERE = """(:category::smallint = 0 OR category = :category)
  AND (NOT :negative_only OR sentiment = :bad)
  AND (:after_time::timestamptz IS NULL OR (create_time, id) < (:after_time, :after_id))"""
RECENT_FEEDBACK = NamedSQL(f"""
SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE {_RECENT_FEEDBACK_WHERE}
ORDER BY create_time DESC, id DESC LIMIT :limit""")

# With `text` (the note / the body contains it): repository/text_search.py.
# Both with the last days first (migration 0017's day-keyed trigram indexes).
RECENT_RATINGS_TEXT = text_search.statements(
    RATING_COLUMNS, "ratings", _RECENT_RATINGS_WHERE, "note ILIKE :text ESCAPE '\\'", "update_time",
    text_search.Days("day_trigrams(update_time, note)", "note <> ''", "ratings_note_time",
                     "SELECT min(update_time) FROM ratings WHERE origin = :user_origin AND note <> ''"))
RECENT_FEEDBACK_TEXT = text_search.statements(
    FEEDBACK_COLUMNS, "feedback", _RECENT_FEEDBACK_WHERE, "body ILIKE :text ESCAPE '\\'", "create_time",
    text_search.Days("day_trigrams(create_time, body)", "", "feedback",
                     "SELECT min(create_time) FROM feedback"))

# The per-turn view (GetTurnFeedback): one owner's ratings (any origin) and reports of one turn.
TURN_RATINGS = f"""
SELECT {RATING_COLUMNS} FROM ratings WHERE owner = $1 AND conversation = $2 AND turn_index = $3
ORDER BY scope, aspect, artifact_id"""
TURN_REPORTS = f"""
SELECT {FEEDBACK_COLUMNS} FROM feedback
WHERE owner = $1 AND instance = $2 AND COALESCE((snapshot->>'turn_index')::int, 0) = $3
  AND snapshot_source <> $4
ORDER BY create_time, id"""

_NAMED = {"user_origin": RatingOrigin.USER, "positive": RatingSentiment.POSITIVE,
          "neutral": RatingSentiment.NEUTRAL, "negative": RatingSentiment.NEGATIVE, "bad": Sentiment.BAD}


def _dimensions(got: list[asyncpg.Record]) -> list[tuple[AspectCount, DailyCount]]:
    out = []
    for r in got:
        total = r["positive"] + r["neutral"] + r["negative"]
        out.append((AspectCount(RatingScope(r["scope"]), r["aspect"], total, r["positive"], r["neutral"], r["negative"]),
                    DailyCount(r["day"], r["positive"], r["neutral"], r["negative"])))
    return out



# CountConversationFeedback: per requested conversation ($2, ≤ 100, in order) the owner's reports and
# USER ratings, each counted from its (owner, conversation) index (feedback_owner_instance_time,
# ratings_owner_conversation): a conversation costs its own rows, never the owner's whole history.
CONVERSATION_COUNTS = """
SELECT c.conversation,
       (SELECT count(*) FROM feedback f WHERE f.owner = $1 AND f.instance = c.conversation) AS reports,
       (SELECT count(*) FROM ratings r WHERE r.owner = $1 AND r.conversation = c.conversation AND r.origin = $3)
           AS ratings
FROM unnest($2::text[]) WITH ORDINALITY AS c(conversation, n)
ORDER BY c.n
"""


@dataclass
class StatisticsStore:
    """The statistics' and the operator feed's reads over `pool` (the Stats use case's store): every
    owner's USER ratings and reports."""

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

    async def recent(self, f: RecentFilter, after: tuple[dt.datetime, str] | None, limit: int, ratings: bool,
                     reports: bool) -> tuple[list[Rating], list[Report]]:
        values = {**_NAMED, "scope": f.scope, "aspect": f.aspect, "sentiment": f.sentiment, "category": f.category,
                  "text": like_pattern(f.text), "needle": f.text, "negative_only": f.negative_only,
                  "reason": f.reason, "choice": f.choice,
                  "after_time": after[0] if after else None, "after_id": after[1] if after else "", "limit": limit}
        r = [rows.rating(x) for x in await self._recent(RECENT_RATINGS, RECENT_RATINGS_TEXT, values)] \
            if ratings else []
        fb = [rows.report(x) for x in await self._recent(RECENT_FEEDBACK, RECENT_FEEDBACK_TEXT, values)] \
            if reports else []
        return r, fb

    async def _recent(self, plain: NamedSQL, text: text_search.Search, values: dict[str, Any]
                      ) -> list[asyncpg.Record]:
        """One table's part of the feed; with a text, in bounded steps (`text_search.fetch_matches`)."""
        if not values["text"]:
            return await fetch_custom_plan(self.pool, *plain.bind(values))
        return await text_search.fetch_matches(self.pool, text, values)

    async def conversation_counts(self, owner: str, conversations: list[str]) -> list[tuple[str, int, int]]:
        """(conversation, reports, USER ratings) of `owner` for each conversation, in the given order."""
        rows_ = await self.pool.fetch(CONVERSATION_COUNTS, owner, conversations, RatingOrigin.USER)
        return [(r["conversation"], r["reports"], r["ratings"]) for r in rows_]

    async def turn_feedback(self, owner: str, conversation: str, turn_index: int) -> tuple[list[Rating], list[Report]]:
        """Every rating (any origin) and report of `owner` about one turn."""
        async with self.pool.acquire() as conn:
            ratings = await conn.fetch(TURN_RATINGS, owner, conversation, turn_index)
            reports = await conn.fetch(TURN_REPORTS, owner, conversation, turn_index, SnapshotSource.NONE)
        return [rows.rating(r) for r in ratings], [rows.report(r) for r in reports]
