"""Dataset export reads (issue 24): the caller's labelled turns in (conversation, turn) order, their
ratings and their reports, one page at a time (keyset on (conversation, turn_index))."""
from __future__ import annotations

import datetime as dt

import asyncpg

from services.common.db import NamedSQL
from services.feedback.model.enums import RatingOrigin, RatingSentiment, SnapshotSource
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report
from services.feedback.repository import rows
from services.feedback.repository.ratings import RATING_COLUMNS
from services.feedback.repository.reports import FEEDBACK_COLUMNS

_ORIGIN = "(:with_copies OR origin = :user_origin)"
LABELLED_TURNS = NamedSQL(f"""
SELECT DISTINCT conversation, turn_index FROM ratings
WHERE owner = :owner AND (:conversation = '' OR conversation = :conversation) AND {_ORIGIN}
  AND (:aspect = '' OR aspect = :aspect) AND (:sentiment::smallint = 0 OR sentiment = :sentiment)
  AND (:since::timestamptz IS NULL OR update_time >= :since) AND (:until::timestamptz IS NULL OR update_time < :until)
  AND (conversation, turn_index) > (:after_conversation::text, :after_turn::int)
ORDER BY conversation, turn_index LIMIT :limit""")
TURN_RATINGS = NamedSQL(f"""
SELECT {RATING_COLUMNS} FROM ratings
WHERE owner = :owner AND {_ORIGIN}
  AND (conversation, turn_index) IN (SELECT * FROM unnest(:conversations::text[], :turns::int[]))
ORDER BY conversation, turn_index, scope, aspect, artifact_id""")
TURN_REPORTS = f"""
SELECT {FEEDBACK_COLUMNS} FROM feedback
WHERE owner = $1 AND snapshot_source <> $4
  AND (instance, COALESCE((snapshot->>'turn_index')::int, 0)) IN (SELECT * FROM unnest($2::text[], $3::int[]))
ORDER BY create_time, id"""


class DatasetStore:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def labelled_turns(self, owner: str, conversation: str, aspect: str, sentiment: RatingSentiment,
                             since: dt.datetime | None, until: dt.datetime | None, with_copies: bool,
                             after: tuple[str, int], limit: int) -> list[tuple[str, int]]:
        got = await self.pool.fetch(*LABELLED_TURNS.bind({
            "owner": owner, "conversation": conversation, "aspect": aspect, "sentiment": sentiment, "since": since,
            "until": until, "with_copies": with_copies, "user_origin": RatingOrigin.USER,
            "after_conversation": after[0], "after_turn": after[1], "limit": limit}))
        return [(r["conversation"], r["turn_index"]) for r in got]

    async def turn_labels(self, owner: str, turns: list[tuple[str, int]], with_copies: bool
                          ) -> tuple[list[Rating], list[Report]]:
        convs, idx = [c for c, _ in turns], [t for _, t in turns]
        ratings = await self.pool.fetch(*TURN_RATINGS.bind({
            "owner": owner, "with_copies": with_copies, "user_origin": RatingOrigin.USER, "conversations": convs,
            "turns": idx}))
        reports = await self.pool.fetch(TURN_REPORTS, owner, convs, idx, SnapshotSource.NONE)
        return [rows.rating(r) for r in ratings], [rows.report(r) for r in reports]
