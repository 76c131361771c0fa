"""Dataset export reads (issue 24): the caller's labelled turns in (conversation, turn) order, their
ratings, the evaluations other systems sent of them (table `evaluations`) and their reports, one page at a time (keyset on (conversation, turn_index))."""
from __future__ import annotations

import datetime as dt

import asyncpg

from services.common.db import NamedSQL
from services.feedback.model.enums import AuthorKind, RatingOrigin, RatingSentiment, SnapshotSource
from services.feedback.model.evaluation import StoredEvaluation
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report
from services.feedback.repository import rows
from services.feedback.repository.evaluations import EVALUATION_COLUMNS, evaluation_row
from services.feedback.repository.ratings import RATING_COLUMNS
from services.feedback.repository.reports import FEEDBACK_COLUMNS

_ORIGIN = "(:with_copies OR origin = :user_origin)"
# The filters both tables share: the evaluation's name is its aspect, its derived sentiment its sentiment.
_SHARED = """owner = :owner AND (:conversation = '' OR conversation = :conversation)
  AND (:sentiment::smallint = 0 OR sentiment = :sentiment)
  AND (:since::timestamptz IS NULL OR update_time >= :since) AND (:until::timestamptz IS NULL OR update_time < :until)
  AND (conversation, turn_index) > (:after_conversation::text, :after_turn::int)"""
# The owner's ratings are HUMAN; evaluations carry their producer's kind (0 = any kind).
LABELLED_TURNS = NamedSQL(f"""
SELECT conversation, turn_index FROM (
    (SELECT conversation, turn_index FROM ratings
     WHERE :author_kind::smallint IN (0, :human) AND {_SHARED} AND {_ORIGIN} AND (:aspect = '' OR aspect = :aspect)
     ORDER BY conversation, turn_index LIMIT :limit)
    UNION
    (SELECT conversation, turn_index FROM evaluations
     WHERE (:author_kind = 0 OR author_kind = :author_kind) AND {_SHARED} AND (:aspect = '' OR name = :aspect)
     ORDER BY conversation, turn_index LIMIT :limit)
) labelled
ORDER BY conversation, turn_index LIMIT :limit""")
TURN_RATINGS = NamedSQL(f"""
SELECT {RATING_COLUMNS} FROM ratings
WHERE owner = :owner AND {_ORIGIN}
  AND (conversation, turn_index) IN (SELECT * FROM unnest(:conversations::text[], :turns::int[]))
ORDER BY conversation, turn_index, scope, aspect, artifact_id""")
TURN_EVALUATIONS = f"""
SELECT {EVALUATION_COLUMNS} FROM evaluations
WHERE owner = $1 AND (conversation, turn_index) IN (SELECT * FROM unnest($2::text[], $3::int[]))
ORDER BY conversation, turn_index, name, identifier"""
TURN_REPORTS = f"""
SELECT {FEEDBACK_COLUMNS} FROM feedback
WHERE owner = $1 AND snapshot_source <> $4
  AND (instance, COALESCE((snapshot->>'turn_index')::int, 0)) IN (SELECT * FROM unnest($2::text[], $3::int[]))
ORDER BY create_time, id"""


class DatasetStore:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def labelled_turns(self, owner: str, conversation: str, aspect: str, sentiment: RatingSentiment,
                             author_kind: AuthorKind, since: dt.datetime | None, until: dt.datetime | None,
                             with_copies: bool, after: tuple[str, int], limit: int) -> list[tuple[str, int]]:
        """At most `limit` (conversation, turn) after `after`, in order, with a rating or an evaluation
        matching the filters (AuthorKind.UNSPECIFIED: any author)."""
        got = await self.pool.fetch(*LABELLED_TURNS.bind({
            "owner": owner, "conversation": conversation, "aspect": aspect, "sentiment": sentiment, "since": since,
            "until": until, "with_copies": with_copies, "user_origin": RatingOrigin.USER,
            "author_kind": author_kind, "human": AuthorKind.HUMAN,
            "after_conversation": after[0], "after_turn": after[1], "limit": limit}))
        return [(r["conversation"], r["turn_index"]) for r in got]

    async def turn_evaluations(self, owner: str, turns: list[tuple[str, int]]) -> list[StoredEvaluation]:
        """Every evaluation of these turns of `owner`'s conversations, by turn, name, identifier."""
        got = await self.pool.fetch(TURN_EVALUATIONS, owner, [c for c, _ in turns], [t for _, t in turns])
        return [evaluation_row(r) for r in got]

    async def turn_labels(self, owner: str, turns: list[tuple[str, int]], with_copies: bool
                          ) -> tuple[list[Rating], list[Report]]:
        convs, idx = [c for c, _ in turns], [t for _, t in turns]
        ratings = await self.pool.fetch(*TURN_RATINGS.bind({
            "owner": owner, "with_copies": with_copies, "user_origin": RatingOrigin.USER, "conversations": convs,
            "turns": idx}))
        reports = await self.pool.fetch(TURN_REPORTS, owner, convs, idx, SnapshotSource.NONE)
        return [rows.rating(r) for r in ratings], [rows.report(r) for r in reports]
