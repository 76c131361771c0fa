"""Evaluations other systems sent (issue 24, migration 0060): SQL of table `evaluations` and the store.

Upsert on the key (scope, target, name, identifier): a repeat with the same values writes nothing
(version and times kept); a change bumps the version and never moves update_time backwards. Enum
values are bound as the model's members (AuthorKind, RatingScope, RatingSentiment), never as literals.
"""
from __future__ import annotations

import datetime as dt
import uuid

import asyncpg

from services.feedback.model.enums import AuthorKind, EvaluationConvention, RatingScope, RatingSentiment
from services.feedback.model.evaluation import EvaluationCount, EvaluationIn, StoredEvaluation, TurnAnchor

EVALUATION_COLUMNS = """id, scope, target, name, identifier, author_kind, convention, conversation, turn_index, owner, message,
    label, score, sentiment, explanation, response_id, source, version, create_time, update_time"""

# `up`: the row written (inserted, or updated because a value changed); else the row as stored.
UPSERT = f"""
WITH up AS (
    INSERT INTO evaluations AS e ({EVALUATION_COLUMNS})
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, 1, now(), now())
    ON CONFLICT (scope, target, name, identifier) DO UPDATE SET
        author_kind = EXCLUDED.author_kind, convention = EXCLUDED.convention,
        conversation = EXCLUDED.conversation, turn_index = EXCLUDED.turn_index, owner = EXCLUDED.owner,
        message = EXCLUDED.message, label = EXCLUDED.label, score = EXCLUDED.score,
        sentiment = EXCLUDED.sentiment, explanation = EXCLUDED.explanation,
        response_id = EXCLUDED.response_id, source = EXCLUDED.source,
        version = e.version + 1, update_time = greatest(now(), e.update_time)
    WHERE (e.author_kind, e.convention, e.conversation, e.turn_index, e.owner, e.message, e.label, e.score,
           e.explanation, e.response_id, e.source)
        IS DISTINCT FROM (EXCLUDED.author_kind, EXCLUDED.convention, EXCLUDED.conversation, EXCLUDED.turn_index,
           EXCLUDED.owner, EXCLUDED.message, EXCLUDED.label, EXCLUDED.score, EXCLUDED.explanation,
           EXCLUDED.response_id, EXCLUDED.source)
    RETURNING {EVALUATION_COLUMNS}
)
SELECT * FROM up
UNION ALL
SELECT {EVALUATION_COLUMNS} FROM evaluations
WHERE scope = $2 AND target = $3 AND name = $4 AND identifier = $5 AND NOT EXISTS (SELECT 1 FROM up)
"""
GET_BY_KEY = f"SELECT {EVALUATION_COLUMNS} FROM evaluations WHERE scope = $1 AND target = $2 AND name = $3 AND identifier = $4"
TURN = f"SELECT {EVALUATION_COLUMNS} FROM evaluations WHERE conversation = $1 AND turn_index = $2 ORDER BY name, identifier"
# GetFeedbackStats' evaluations: per (author kind, name) over [since, ∞); index evaluations_update_time.
COUNTS = """
SELECT author_kind, name,
       count(*) FILTER (WHERE sentiment = $2) AS positive, count(*) FILTER (WHERE sentiment = $3) AS neutral,
       count(*) FILTER (WHERE sentiment = $4) AS negative, count(*) AS total, avg(score) AS mean_score
FROM evaluations WHERE update_time >= $1 GROUP BY author_kind, name ORDER BY author_kind, name
"""


def evaluation_row(r: asyncpg.Record) -> StoredEvaluation:
    ev = EvaluationIn(r["target"], r["name"], r["label"], r["score"], r["explanation"], r["response_id"],
                      AuthorKind(r["author_kind"]), r["identifier"], r["source"], EvaluationConvention(r["convention"]),
                      RatingScope(r["scope"]))
    return StoredEvaluation(r["id"], ev, TurnAnchor(r["conversation"], r["turn_index"], r["owner"], r["message"]),
                            RatingSentiment(r["sentiment"]), r["version"], r["create_time"], r["update_time"])


class EvaluationStore:
    def __init__(self, pool: asyncpg.Pool):
        self._pool = pool

    async def put(self, items: list[tuple[EvaluationIn, TurnAnchor, RatingSentiment]]) -> list[StoredEvaluation]:
        """Upsert each (evaluation, its turn, its sentiment), in order, on one connection."""
        out: list[StoredEvaluation] = []
        async with self._pool.acquire() as conn:
            for e, a, sentiment in items:
                args = (uuid.uuid4().hex, e.scope.value, e.trace_id, e.name, e.identifier, e.author_kind.value,
                        e.convention.value, a.conversation, a.turn_index, a.owner, a.reply, e.label, e.score,
                        sentiment.value, e.explanation, e.response_id, e.source)
                row = await conn.fetchrow(UPSERT, *args)
                if row is None:  # a concurrent first insert of the key, not yet in this statement's snapshot
                    row = await conn.fetchrow(UPSERT, *args)
                out.append(evaluation_row(row))
        return out

    async def turn(self, conversation: str, turn_index: int) -> list[StoredEvaluation]:
        async with self._pool.acquire() as conn:
            return [evaluation_row(r) for r in await conn.fetch(TURN, conversation, turn_index)]

    async def counts(self, since: dt.datetime) -> list[EvaluationCount]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(COUNTS, since, RatingSentiment.POSITIVE.value, RatingSentiment.NEUTRAL.value,
                                    RatingSentiment.NEGATIVE.value)
        return [EvaluationCount(AuthorKind(r["author_kind"]), r["name"], r["positive"], r["neutral"], r["negative"],
                                r["total"], r["mean_score"]) for r in rows]
