"""Ratings: SQL of table `ratings` (and the per-aspect / per-day counts the statistics sum), and the
store that runs it.

Rating compare-and-swap is a conditional `UPDATE … WHERE version = :version` (holds across processes);
a PutRating request id is recorded in the same statement as the write (the request ledger). Enum
values are bound by name (`RatingOrigin.USER`, `RatingSentiment.NEGATIVE`), never written as numbers.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.common import ledger
from services.common.db import NamedSQL, fetch_custom_plan, retry_conflicts
from services.common.etags import Etag
from services.common.ledger import Ledger
from services.feedback.model.enums import (
    RatingOrigin,
    RatingScope,
    RatingSentiment,
    Sentiment,
)
from services.feedback.model.rating import PutOutcome, Rating, RatingFilter, RatingKey, RatingWrite
from services.feedback.repository import rows

RATING_COLUMNS = """id, conversation, turn_index, owner, scope, aspect, artifact_id, sentiment, category, note, origin,
    message, version, create_time, update_time, reasons, choice"""

GET_RATING_BY_KEY = f"""
SELECT {RATING_COLUMNS} FROM ratings
WHERE conversation = $1 AND turn_index = $2 AND owner = $3 AND scope = $4 AND aspect = $5 AND artifact_id = $6"""

# PutRating statements. `prior`: an earlier put with this request id (then nothing is written: the
# caller answers it as a retry); `claim` claims the request id before the write, which runs only when
# this call claimed it (or has no request id): of concurrent puts with one request id exactly one writes
# (ledger.claim_cte). Always one row: seen / prior_fingerprint; raced (another call claimed the id while
# this statement ran: nothing written, its record is read after); then the written rating's columns (all
# NULL when nothing was written). `:own_*`: whether this call owns sentiment / category / note / reasons
# / choice (AIP-134).
_RATING_PRIOR = ledger.prior_cte("prior") + ", " + ledger.claim_cte("claim", "prior")
_CLAIMED = "(:request_id::uuid IS NULL OR EXISTS (SELECT 1 FROM claim))"
_RATING_RECORD = """one AS (SELECT 1)
SELECT EXISTS (SELECT 1 FROM prior) AS seen, (SELECT fingerprint FROM prior) AS prior_fingerprint,
    NOT (EXISTS (SELECT 1 FROM prior) OR {claimed}) AS raced, up.*
FROM one LEFT JOIN up ON true""".format(claimed=_CLAIMED)

# A new row gets the defaults for the fields this call does not own. A row whose owned fields already
# hold the values (and is a USER rating) is not touched: a no-op keeps version and times.
UPSERT_RATING = NamedSQL(f"""
WITH {_RATING_PRIOR}, up AS (
    INSERT INTO ratings AS r (id, conversation, turn_index, owner, scope, aspect, artifact_id, sentiment, category,
        note, origin, message, version, create_time, update_time, reasons, choice)
    SELECT :id::text, :conversation::text, :turn_index::integer, :owner::text, :scope::smallint, :aspect::text,
        :artifact_id::text, CASE WHEN :own_sentiment THEN :sentiment::smallint ELSE 0::smallint END,
        CASE WHEN :own_category THEN :category::smallint ELSE 0::smallint END,
        CASE WHEN :own_note THEN :note::text ELSE '' END, :user_origin::smallint, :message::text, 1, now(), now(),
        CASE WHEN :own_reasons THEN :reasons::text[] ELSE '{{}}'::text[] END,
        CASE WHEN :own_choice THEN :choice::text ELSE '' END
    WHERE NOT EXISTS (SELECT 1 FROM prior) AND {_CLAIMED}
    ON CONFLICT (conversation, turn_index, owner, scope, aspect, artifact_id) DO UPDATE SET
        sentiment = CASE WHEN :own_sentiment THEN EXCLUDED.sentiment ELSE r.sentiment END,
        category = CASE WHEN :own_category THEN EXCLUDED.category ELSE r.category END,
        note = CASE WHEN :own_note THEN EXCLUDED.note ELSE r.note END,
        reasons = CASE WHEN :own_reasons THEN EXCLUDED.reasons ELSE r.reasons END,
        choice = CASE WHEN :own_choice THEN EXCLUDED.choice ELSE r.choice END,
        origin = EXCLUDED.origin,
        message = COALESCE(NULLIF(EXCLUDED.message, ''), r.message),
        version = r.version + 1,
        update_time = GREATEST(now(), r.update_time)
    WHERE (:own_sentiment AND r.sentiment IS DISTINCT FROM EXCLUDED.sentiment)
       OR (:own_category AND r.category IS DISTINCT FROM EXCLUDED.category)
       OR (:own_note AND r.note IS DISTINCT FROM EXCLUDED.note)
       OR (:own_reasons AND r.reasons IS DISTINCT FROM EXCLUDED.reasons)
       OR (:own_choice AND r.choice IS DISTINCT FROM EXCLUDED.choice)
       OR r.origin <> EXCLUDED.origin
    RETURNING {RATING_COLUMNS}
), {_RATING_RECORD}""")

# Strict compare-and-swap: only when the stored row is `:cas_id` at version `:version` (even for a no-op, which then
# keeps version and times). No rating columns = stale etag (or no such rating).
_RATING_CHANGED = """((:own_sentiment AND r.sentiment IS DISTINCT FROM :sentiment::smallint)
    OR (:own_category AND r.category IS DISTINCT FROM :category::smallint)
    OR (:own_note AND r.note IS DISTINCT FROM :note::text)
    OR (:own_reasons AND r.reasons IS DISTINCT FROM :reasons::text[])
    OR (:own_choice AND r.choice IS DISTINCT FROM :choice::text) OR r.origin <> :user_origin::smallint)"""
CAS_RATING = NamedSQL(f"""
WITH {_RATING_PRIOR}, up AS (
    UPDATE ratings AS r SET
        sentiment = CASE WHEN :own_sentiment THEN :sentiment::smallint ELSE r.sentiment END,
        category = CASE WHEN :own_category THEN :category::smallint ELSE r.category END,
        note = CASE WHEN :own_note THEN :note::text ELSE r.note END,
        reasons = CASE WHEN :own_reasons THEN :reasons::text[] ELSE r.reasons END,
        choice = CASE WHEN :own_choice THEN :choice::text ELSE r.choice END,
        origin = :user_origin::smallint,
        message = COALESCE(NULLIF(:message::text, ''), r.message),
        version = r.version + CASE WHEN {_RATING_CHANGED} THEN 1 ELSE 0 END,
        update_time = CASE WHEN {_RATING_CHANGED} THEN GREATEST(now(), r.update_time) ELSE r.update_time END
    WHERE r.conversation = :conversation AND r.turn_index = :turn_index AND r.owner = :owner
      AND r.scope = :scope::smallint AND r.aspect = :aspect AND r.artifact_id = :artifact_id
      AND r.version = :version AND r.id = :cas_id AND NOT EXISTS (SELECT 1 FROM prior) AND {_CLAIMED}
    RETURNING {RATING_COLUMNS}
), {_RATING_RECORD}""")

DELETE_RATING = "DELETE FROM ratings WHERE id = $1 AND owner = $2"

# NoteTurnsRemoved (migrations 0065, 0085), one transaction, its locks in the order every other writer
# of these rows takes them (a writer waiting on one lock holds none the removal still needs, so the two
# cannot deadlock): 1. the conversation's removal lock (a rating or report insert takes it shared
# before anything else); 2. the removal (a repeat records nothing new); 3. the owner's reports of those
# turns, marked (kept, migration 0066): report rows before the rollup rows their triggers touch, as
# DeleteFeedback and UpdateFeedback take them; 4. the owner's ratings of those turns, deleted in ONE
# statement (each rating row locked before any rollup row is: AFTER row triggers run at the end of the
# statement, as for DeleteRating; one statement per range held the first range's
# conversation_activity row while waiting for a rating of the next). CONVERSATION-scope ratings name no
# turn and are kept. $3 / $4: the first and last turn index of each removed range; $5: trace ids (the
# reports') or the CONVERSATION scope (the ratings').
LOCK_REMOVAL = "SELECT pg_advisory_xact_lock(removed_turns_lock_key($1, $2))"
INSERT_REMOVAL = """
INSERT INTO removed_turns (owner, conversation, first_turn_index, last_turn_index, remove_time)
SELECT $1, $2, r.f, r.l, now() FROM unnest($3::int[], $4::int[]) AS r (f, l) ON CONFLICT DO NOTHING"""
MARK_REMOVED_REPORTS = """
UPDATE feedback SET turn_removed_time = now()
WHERE owner = $1 AND instance = $2 AND turn_removed_time IS NULL
  AND (trace_id = ANY($5::text[]) OR EXISTS (SELECT 1 FROM unnest($3::int[], $4::int[]) AS r (f, l)
                                           WHERE report_turn_index(snapshot, snapshot_source) BETWEEN r.f AND r.l))"""
DELETE_REMOVED_RATINGS = """
DELETE FROM ratings x USING unnest($3::int[], $4::int[]) AS r (f, l)
WHERE x.owner = $1 AND x.conversation = $2 AND x.turn_index BETWEEN r.f AND r.l AND x.scope <> $5"""
# 5. the evaluations other systems sent about those turns (migration 0060: ratings with an author kind,
# of the conversation's owner), deleted like the owner's ratings; they hold no rollup row.
DELETE_REMOVED_EVALUATIONS = """
DELETE FROM evaluations x USING unnest($3::int[], $4::int[]) AS r (f, l)
WHERE x.owner = $1 AND x.conversation = $2 AND x.turn_index BETWEEN r.f AND r.l"""
# SQLSTATE of the ratings trigger refusing a rating on a removed turn (migration 0065).
TURN_REMOVED_SQLSTATE = "AF001"

# ListRatings' optional filters (0 / '' / NULL = not applied).
_RATING_FILTERS = """(:sentiment::smallint = 0 OR sentiment = :sentiment)
  AND (:reason = '' OR reasons @> ARRAY[:reason::text])
  AND (:start_time::timestamptz IS NULL OR update_time >= :start_time)
  AND (:origin::smallint = 0 OR origin = :origin)"""
LIST_RATINGS = NamedSQL(f"""
SELECT {RATING_COLUMNS} FROM ratings
WHERE owner = :owner AND conversation = :conversation AND (:turn::int IS NULL OR turn_index = :turn)
  AND {_RATING_FILTERS}
  AND (:a_turn::int IS NULL OR (turn_index, scope, aspect, artifact_id) > (:a_turn, :a_scope, :a_aspect, :a_artifact))
ORDER BY turn_index, scope, aspect, artifact_id
LIMIT :limit""")
# `instances/-`: every conversation of the owner, newest first (index ratings_owner_time, migration 0070).
LIST_OWNER_RATINGS = NamedSQL(f"""
SELECT {RATING_COLUMNS} FROM ratings
WHERE owner = :owner AND {_RATING_FILTERS}
  AND (:after_time::timestamptz IS NULL OR (update_time, id) < (:after_time, :after_id))
ORDER BY update_time DESC, id DESC
LIMIT :limit""")

# `:turns` / `:messages`: the fork's turns that have a stored non-empty assistant message, and those
# messages' names: a MESSAGE rating is copied only onto such a turn (and names its message there);
# other scopes are copied as they are. With `:request_id` (CopyRatings' own, ForkConversation's per
# fork): it is claimed in the request ledger (`CopyRatings`) in the same statement, and a claimed id
# copies nothing. A turn removed on the fork (migration 0065) gets no copy.
COPY_RATINGS = NamedSQL(f"""
WITH {ledger.record_cte("claim", "''", "(SELECT 1) AS one")}
INSERT INTO ratings (id, conversation, turn_index, owner, scope, aspect, artifact_id, sentiment, category, note, origin,
    message, version, create_time, update_time, reasons, choice)
SELECT md5(random()::text || clock_timestamp()::text || r.id), :target, r.turn_index, r.owner, r.scope, r.aspect,
    r.artifact_id, r.sentiment, r.category, r.note, :branch_copy, COALESCE(t.message, ''), 1, now(), now(),
    r.reasons, r.choice
FROM ratings r
LEFT JOIN unnest(:turns::int[], :messages::text[]) AS t (turn_index, message) ON t.turn_index = r.turn_index
WHERE r.owner = :owner AND r.conversation = :source AND r.turn_index <= :through
  AND (r.scope <> :message_scope OR t.message IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM removed_turns x WHERE x.owner = r.owner AND x.conversation = :target
                  AND r.turn_index BETWEEN x.first_turn_index AND x.last_turn_index)
  AND (:request_id::uuid IS NULL OR EXISTS (SELECT 1 FROM claim))
ON CONFLICT (conversation, turn_index, owner, scope, aspect, artifact_id) DO NOTHING""")

# ---- statistics (operator scope; USER-origin ratings only; read by repository/statistics.py)
# From the hourly rollups (migration 0010, kept by triggers): every whole hour from the first hour
# boundary at or after :since from `*_hour_counts`, the part of an hour before that boundary from the
# rows themselves; the same numbers as counting the rows, without reading a row per rating. A window
# starting on the hour (GetFeedbackStats' start at UTC midnight) reads no row at all: a boundary of
# "the hour after the one holding :since" read a whole hour of rows (≈ 2,300 ratings at 10M, three
# times per call; issue 17). `- 1 µs` is the exact ceiling (timestamptz resolution).
_RATING_COUNTS = """WITH c AS (
    SELECT hour AS t, scope, aspect, sentiment, n FROM rating_hour_counts
    WHERE hour >= date_trunc('hour', :since::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour'
    UNION ALL
    SELECT update_time, scope, aspect, sentiment, 1 FROM ratings
    WHERE origin = :user_origin AND update_time >= :since
      AND update_time < date_trunc('hour', :since::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour')"""
_SENTIMENT_COUNTS = """coalesce(sum(n) FILTER (WHERE sentiment = :positive), 0)::bigint AS positive,
    coalesce(sum(n) FILTER (WHERE sentiment = :neutral), 0)::bigint AS neutral,
    coalesce(sum(n) FILTER (WHERE sentiment = :negative), 0)::bigint AS negative"""
_REPORT_COUNTS = """WITH c AS (
    SELECT hour AS t, category, n FROM report_hour_counts
    WHERE hour >= date_trunc('hour', $1::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour'
    UNION ALL
    SELECT create_time, category, 1 FROM feedback
    WHERE turn_removed_time IS NULL AND create_time >= $1 AND create_time < date_trunc('hour', $1::timestamptz - interval '1 microsecond', 'UTC') + interval '1 hour')"""
# Per (category, UTC day): the reports created since $1 (the categories' totals are their sums).
REPORT_DAYS = f"""{_REPORT_COUNTS}
SELECT category, (t AT TIME ZONE 'UTC')::date AS day, sum(n)::bigint AS count FROM c GROUP BY 1, 2 HAVING sum(n) > 0
ORDER BY 1, 2"""

# The request ledger's methods this module records (services/common/ledger.py).
PUTS, COPIES = Ledger("PutRating"), Ledger("CopyRatings")

_NAMED = {"user_origin": RatingOrigin.USER, "branch_copy": RatingOrigin.BRANCH_COPY,
          "message_scope": RatingScope.MESSAGE, "positive": RatingSentiment.POSITIVE,
          "neutral": RatingSentiment.NEUTRAL, "negative": RatingSentiment.NEGATIVE, "bad": Sentiment.BAD}


def _outcome(r: asyncpg.Record) -> PutOutcome:
    return PutOutcome(rows.rating(r) if r["id"] is not None else None, r["seen"], r["prior_fingerprint"])


def _key_values(key: RatingKey, owner: str) -> dict[str, Any]:
    return {"conversation": key.conversation, "turn_index": key.turn_index, "owner": owner, "scope": key.scope,
            "aspect": key.aspect, "artifact_id": key.artifact_id}


def _filter_values(f: RatingFilter) -> dict[str, Any]:
    return {"sentiment": f.sentiment, "reason": f.reason, "start_time": f.start_time, "origin": f.origin}


class TurnRemoved(Exception):
    """The rated turn was removed in chat (DeleteTurn / Clear chat): no rating may be written on it."""


@dataclass
class RatingStore:
    """Reads and writes of ratings over `pool` (the Ratings use case's store)."""

    pool: asyncpg.Pool

    async def get_rating(self, key: RatingKey, owner: str) -> Rating | None:
        r = await self.pool.fetchrow(GET_RATING_BY_KEY, key.conversation, key.turn_index, owner, key.scope,
                                     key.aspect, key.artifact_id)
        return rows.rating(r) if r is not None else None

    async def put_rating(self, key: RatingKey, owner: str, w: RatingWrite, *, new_id: str, etag: Etag | None,
                         request_id: uuid.UUID | None, fingerprint: bytes | None) -> PutOutcome:
        """Upsert (`etag` None) or strict compare-and-swap at the etag's version of the etag's row (its
        incarnation: a rating deleted and put again is another row), one statement either way.
        `written` None: a retry (`seen`), a no-op upsert that kept the row as it was, or (CAS) a stale
        version or no such rating."""
        values = {**_NAMED, **_key_values(key, owner), "sentiment": w.sentiment, "category": w.category,
                  "note": w.note, "own_sentiment": "sentiment" in w.owned, "own_category": "category" in w.owned,
                  "own_note": "note" in w.owned, "own_reasons": "reasons" in w.owned, "reasons": list(w.reasons),
                  "own_choice": "choice" in w.owned, "choice": w.choice, "message": w.message, "id": new_id,
                  "version": etag.version if etag else None, "cas_id": etag.incarnation if etag else None,
                  **PUTS.params(owner, request_id, fingerprint)}
        sql = UPSERT_RATING if etag is None else CAS_RATING
        try:  # one statement (its ledger claim included): rolled back whole, so run again
            row = await retry_conflicts(lambda: self.pool.fetchrow(*sql.bind(values)))
        except asyncpg.PostgresError as e:
            if e.sqlstate == TURN_REMOVED_SQLSTATE:
                raise TurnRemoved() from None
            raise
        if row["raced"]:  # a concurrent put with this request id claimed it: this one is its retry
            assert request_id is not None
            entry = await PUTS.get(self.pool, owner, request_id)
            return PutOutcome(None, True, entry.fingerprint if entry is not None else None)
        return _outcome(row)

    async def note_turns_removed(self, owner: str, conversation: str, ranges: list[tuple[int, int]],
                                 trace_ids: list[str]) -> tuple[int, int]:
        """Record removed turn ranges (first, last; inclusive), mark `owner`'s reports of them (or of
        `trace_ids`) and delete `owner`'s ratings and the evaluations of them, one transaction (run again when PostgreSQL
        rolls it back for a concurrent one); returns (ratings deleted, reports marked), (0, 0) on a repeat."""
        firsts, lasts = [f for f, _ in ranges], [last for _, last in ranges]
        args = (owner, conversation, firsts, lasts, trace_ids)

        async def run() -> tuple[int, int]:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(LOCK_REMOVAL, owner, conversation)
                await conn.execute(INSERT_REMOVAL, *args[:4])
                marked = await conn.execute(MARK_REMOVED_REPORTS, *args)
                deleted = await conn.execute(DELETE_REMOVED_RATINGS, *args[:4], RatingScope.CONVERSATION)
                await conn.execute(DELETE_REMOVED_EVALUATIONS, *args[:4])
            return int(deleted.rsplit(" ", 1)[-1]), int(marked.rsplit(" ", 1)[-1])

        return await retry_conflicts(run)

    async def delete_rating(self, rid: str, owner: str) -> None:
        await retry_conflicts(lambda: self.pool.execute(DELETE_RATING, rid, owner))

    async def list_ratings(self, owner: str, conversation: str, turn_index: int | None, f: RatingFilter,
                           after: tuple[int, int, str, str] | None, limit: int) -> list[Rating]:
        """One conversation's ratings matching `f`: keyset on (turn_index, scope, aspect, artifact_id), ascending."""
        a = after or (None, 0, "", "")
        values = {**_filter_values(f), "owner": owner, "conversation": conversation, "turn": turn_index,
                  "a_turn": a[0], "a_scope": a[1], "a_aspect": a[2], "a_artifact": a[3], "limit": limit}
        # The (owner, conversation, turn_index) index leads whatever the filters: the cached generic plan serves.
        return [rows.rating(r) for r in await self.pool.fetch(*LIST_RATINGS.bind(values))]

    async def list_owner_ratings(self, owner: str, f: RatingFilter, after: tuple[Any, str] | None,
                                 limit: int) -> list[Rating]:
        """Every conversation's ratings matching `f`, newest first: keyset on (update_time, id), descending."""
        values = {**_filter_values(f), "owner": owner, "after_time": after[0] if after else None,
                  "after_id": after[1] if after else "", "limit": limit}
        return [rows.rating(r) for r in await fetch_custom_plan(self.pool, *LIST_OWNER_RATINGS.bind(values))]

    async def copy_ratings(self, owner: str, source: str, target: str, through: int,
                           target_replies: dict[int, str], request_id: uuid.UUID | None = None) -> int:
        """Copy; MESSAGE ratings only onto `target_replies` turns (turn index → assistant message name).
        A `request_id` already claimed copies nothing (0)."""
        turns = list(target_replies)
        values = {**_NAMED, "owner": owner, "target": target, "source": source, "through": through, "turns": turns,
                  "messages": [target_replies[t] for t in turns], **COPIES.params(owner, request_id)}
        try:
            return int((await retry_conflicts(lambda: self.pool.execute(*COPY_RATINGS.bind(values)))).rsplit(" ", 1)[-1])
        except asyncpg.PostgresError as e:
            if e.sqlstate == TURN_REMOVED_SQLSTATE:
                raise TurnRemoved() from None
            raise
