"""All SQL of the feedback service (schema `feedback`), as constants, and the thin functions that run
them over an asyncpg pool. No rule lives here: domain.py decides, this module stores.

Concurrency: an idempotent create first claims its (owner, request_id) in `feedback_create_requests`
(`INSERT … ON CONFLICT`, in the same statement as the row), a ledger that DeleteFeedback only stamps,
so no retry — not even one racing the delete — writes a second row; rating
compare-and-swap is a conditional `UPDATE … WHERE version = $n` (holds across processes); the
capture worker claims rows with `FOR UPDATE SKIP LOCKED` plus a lease (`next_capture_at`), so
several replicas share the queue and no connection is held while the collector is called.
"""
from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import asyncpg

from services.common.db import create_pool as common_create_pool
from services.common.db import skip_reset

FEEDBACK_COLUMNS = """id, owner, request_id, target_kind, message, coding_session, coding_seq, instance, trace_id,
    surface, author, body, sentiment, category, snapshot, snapshot_source, turn_time, trace_state, trace_snapshot,
    capture_attempts, capture_span_count, next_capture_at, capture_time, status, issue_url, filing_until, version,
    create_time, update_time"""

GET_BY_REQUEST_ID = f"""SELECT {FEEDBACK_COLUMNS}, request_fingerprint, created_event_time FROM feedback
WHERE owner = $1 AND request_id = $2"""

# The report a CreateFeedback request id created and DeleteFeedback removed, within $3 seconds.
GET_DELETED_CREATE = """
SELECT feedback_id, request_fingerprint FROM feedback_create_requests
WHERE owner = $1 AND request_id = $2 AND delete_time > now() - make_interval(secs => $3)"""

# A turn already frozen for another report of the same owner is copied, not fetched again: the new
# row is born CAPTURED with the sibling's frozen spans. A CLIENT snapshot (source 2) is never trusted
# with spans: no sibling copy and no capture due time until the worker has verified its anchor with
# the chat service for the owner (REFRESH_DONE sets the due time). `created_event_time` is set when
# the trace id is authoritative (chat-service snapshot): the caller then emits `feedback.created`.
# The request id is claimed in the ledger first: taken (a live report, or one deleted less than $20
# seconds ago) → no row. A deletion record older than that is recycled (the retry is a new report).
INSERT_FEEDBACK = f"""
WITH claim AS (
    INSERT INTO feedback_create_requests AS r (owner, request_id, feedback_id, request_fingerprint, delete_time)
    VALUES ($2, $3, $1, $19, NULL)
    ON CONFLICT (owner, request_id) DO UPDATE SET feedback_id = EXCLUDED.feedback_id,
        request_fingerprint = EXCLUDED.request_fingerprint, delete_time = NULL
    WHERE r.delete_time <= now() - make_interval(secs => $20)
    RETURNING 1
)
INSERT INTO feedback (id, owner, request_id, target_kind, message, coding_session, coding_seq, instance, trace_id,
    surface, author, body, sentiment, category, snapshot, snapshot_source, turn_time, trace_state, next_capture_at,
    refresh_at, trace_snapshot, capture_span_count, capture_time, create_time, update_time, request_fingerprint,
    created_event_time)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
    CASE WHEN $18::smallint = 1 AND sib.trace_snapshot IS NOT NULL THEN 2 ELSE $18::smallint END,
    CASE WHEN $18::smallint = 1 AND $16::smallint <> 2 AND $9::text <> '' AND sib.trace_snapshot IS NULL
        THEN now() ELSE NULL END,
    CASE WHEN $16::smallint = 2 THEN now() ELSE NULL END,
    COALESCE(sib.trace_snapshot, '{{}}'::jsonb), COALESCE(sib.capture_span_count, -1), sib.capture_time, now(), now(),
    $19, CASE WHEN $16::smallint <> 2 AND $9::text <> '' THEN now() ELSE NULL END
FROM claim
LEFT JOIN LATERAL (
    SELECT trace_snapshot, capture_span_count, capture_time FROM feedback
    WHERE owner = $2 AND trace_id = $9::text AND $9::text <> '' AND trace_state = 2 AND $18::smallint = 1
      AND $16::smallint <> 2 AND snapshot_source <> 2
    ORDER BY capture_time DESC LIMIT 1
) AS sib ON true
ON CONFLICT (owner, request_id) DO NOTHING
RETURNING {FEEDBACK_COLUMNS}, request_fingerprint, created_event_time"""

GET_FEEDBACK = f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE id = $1 AND owner = $2"

# (feedback.last_update_request_id / last_update_fingerprint are no longer read or written: the
# feedback_update_requests ledger of migration 0006 replaced them and holds their last values.)
LOCK_FEEDBACK = f"""SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE id = $1 AND owner = $2 FOR UPDATE"""

UPDATE_FEEDBACK = f"""
UPDATE feedback SET status = $3, issue_url = $4,
    version = version + 1, update_time = GREATEST(now(), update_time)
WHERE id = $1 AND owner = $2
RETURNING {FEEDBACK_COLUMNS}"""

# UpdateFeedback request ids (owner, request id → report, request fingerprint), kept `$3` seconds.
GET_UPDATE_REQUEST = """
SELECT feedback_id, request_fingerprint FROM feedback_update_requests
WHERE owner = $1 AND request_id = $2 AND create_time > now() - make_interval(secs => $3)"""
RECORD_UPDATE_REQUEST = """
WITH pruned AS (
    DELETE FROM feedback_update_requests WHERE owner = $1 AND create_time <= now() - make_interval(secs => $5)
)
INSERT INTO feedback_update_requests (owner, request_id, feedback_id, request_fingerprint, create_time)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (owner, request_id) DO UPDATE SET feedback_id = EXCLUDED.feedback_id,
    request_fingerprint = EXCLUDED.request_fingerprint, create_time = EXCLUDED.create_time"""

# Hard delete; the ledger row of the request id that created it is stamped deleted (no content), so a
# late retry of that create writes nothing. Returns the deleted id (no row: nothing deleted).
DELETE_FEEDBACK = """
WITH gone AS (DELETE FROM feedback WHERE id = $1 AND owner = $2 RETURNING owner, request_id, id, request_fingerprint)
INSERT INTO feedback_create_requests (owner, request_id, feedback_id, request_fingerprint, delete_time)
SELECT owner, request_id, id, request_fingerprint, now() FROM gone
ON CONFLICT (owner, request_id) DO UPDATE SET feedback_id = EXCLUDED.feedback_id,
    request_fingerprint = EXCLUDED.request_fingerprint, delete_time = EXCLUDED.delete_time
RETURNING feedback_id"""

# Completed deletes by request id (no content), kept DELETE_RECORD_RETENTION_S; pruned per owner on delete
# together with the deleted reports' create request ids (same retention).
RECORD_DELETE = """
INSERT INTO deleted_feedback (owner, request_id, feedback_id, delete_time) VALUES ($1, $2, $3, now())
ON CONFLICT (owner, request_id) DO NOTHING"""
GET_DELETE_RECORD = """
SELECT feedback_id FROM deleted_feedback
WHERE owner = $1 AND request_id = $2 AND delete_time > now() - make_interval(secs => $3)"""
PRUNE_DELETE_RECORDS = """
WITH creates AS (
    DELETE FROM feedback_create_requests WHERE owner = $1 AND delete_time <= now() - make_interval(secs => $2)
)
DELETE FROM deleted_feedback WHERE owner = $1 AND delete_time <= now() - make_interval(secs => $2)"""

# Filters are optional (empty / 0 / NULL = not applied); keyset paging on (create_time, id), newest first.
LIST_FEEDBACK = f"""
SELECT {FEEDBACK_COLUMNS} FROM feedback
WHERE owner = $1
  AND ($2 = '' OR instance = $2)
  AND ($3::smallint = 0 OR status = $3)
  AND ($4::smallint = 0 OR author = $4)
  AND ($5::smallint = 0 OR sentiment = $5)
  AND ($6::smallint = 0 OR category = $6)
  AND ($7::timestamptz IS NULL OR create_time >= $7)
  AND ($8::timestamptz IS NULL OR create_time < $8)
  AND ($9 = '' OR body ILIKE $9 ESCAPE '\\' OR snapshot->>'target_text' ILIKE $9 ESCAPE '\\')
  AND ($10 = '' OR trace_id = $10)
  AND ($11::timestamptz IS NULL OR (create_time, id) < ($11, $12))
ORDER BY create_time DESC, id DESC
LIMIT $13"""

# FileFeedback: take the filing claim (only one filer talks to the tracker at a time).
CLAIM_FILING = f"""
UPDATE feedback SET filing_until = now() + make_interval(secs => $3)
WHERE id = $1 AND owner = $2 AND issue_url = '' AND (filing_until IS NULL OR filing_until < now())
RETURNING {FEEDBACK_COLUMNS}"""

FINISH_FILING = f"""
UPDATE feedback SET issue_url = $3, status = 3, filing_until = NULL, version = version + 1,
    update_time = GREATEST(now(), update_time)
WHERE id = $1 AND owner = $2
RETURNING {FEEDBACK_COLUMNS}"""

RELEASE_FILING = "UPDATE feedback SET filing_until = NULL WHERE id = $1 AND owner = $2"

# ---- capture worker
# Claim due PENDING rows: lease them by pushing next_capture_at forward; SKIP LOCKED lets replicas share.
CLAIM_CAPTURE = """
WITH due AS (
    SELECT id FROM feedback
    WHERE trace_state = 1 AND next_capture_at <= now() AND snapshot_source <> 2
    ORDER BY next_capture_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE feedback f SET next_capture_at = now() + make_interval(secs => $2), capture_attempts = capture_attempts + 1
FROM due WHERE f.id = due.id
RETURNING f.id, f.owner, f.trace_id, f.turn_time, f.capture_attempts, f.capture_span_count"""

CAPTURE_PENDING = """
UPDATE feedback SET next_capture_at = now() + make_interval(secs => $2), capture_span_count = $3
WHERE id = $1 AND trace_state = 1"""

CAPTURE_DONE = """
UPDATE feedback SET trace_state = $2, trace_snapshot = $3, capture_span_count = $4, capture_time = now(),
    next_capture_at = NULL, version = version + 1, update_time = GREATEST(now(), update_time)
WHERE id = $1 AND trace_state = 1 AND (snapshot_source <> 2 OR $2 <> 2)"""

# Once a turn is frozen (or known expired) for one report, every other PENDING report of the same
# owner on that turn gets the same copy (one look at the collector serves them all) — except rows whose
# CLIENT snapshot the chat service has not verified yet (they never receive spans).
CAPTURE_DONE_TRACE = """
UPDATE feedback SET trace_state = $3, trace_snapshot = $4, capture_span_count = $5, capture_time = now(),
    next_capture_at = NULL, version = version + 1, update_time = GREATEST(now(), update_time)
WHERE owner = $1 AND trace_id = $2 AND trace_state = 1 AND snapshot_source <> 2"""

# Client snapshots waiting for the authoritative one (chat service was down at create time).
CLAIM_REFRESH = """
WITH due AS (
    SELECT id FROM feedback
    WHERE snapshot_source = 2 AND refresh_at <= now()
    ORDER BY refresh_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE feedback f SET refresh_at = now() + make_interval(secs => $2)
FROM due WHERE f.id = due.id
RETURNING f.id, f.owner, f.target_kind, f.message, f.instance, f.trace_id"""

# The chat service confirmed the anchor for the owner: its snapshot, trace id, time, instance and
# message replace the client's (the client's trace id is never kept), and capture becomes due. The
# trace id is now authoritative: the same statement marks `feedback.created` as emitted and returns
# `emit_created` true exactly once per row (only one verification ever matches `snapshot_source = 2`).
REFRESH_DONE = """
WITH cur AS (SELECT id, created_event_time FROM feedback WHERE id = $1 AND snapshot_source = 2 FOR UPDATE)
UPDATE feedback f SET snapshot = $2, snapshot_source = $3, trace_id = $4,
    turn_time = COALESCE($5, f.turn_time), instance = CASE WHEN $6 = '' THEN f.instance ELSE $6 END,
    message = CASE WHEN $7 = '' THEN f.message ELSE $7 END,
    trace_state = CASE WHEN f.trace_state = 1 AND $4 = '' THEN 0 ELSE f.trace_state END,
    refresh_at = NULL, next_capture_at = CASE WHEN f.trace_state = 1 AND $4 <> '' THEN now() ELSE NULL END,
    created_event_time = CASE WHEN $4 <> '' THEN COALESCE(cur.created_event_time, now())
        ELSE cur.created_event_time END,
    version = f.version + 1, update_time = GREATEST(now(), f.update_time)
FROM cur WHERE f.id = cur.id AND f.snapshot_source = 2
RETURNING f.id, f.trace_id, f.sentiment, f.category, f.author, f.message, f.instance,
    ($4 <> '' AND cur.created_event_time IS NULL) AS emit_created"""

# Claimed client snapshots handed back by a replica that cannot reach the chat service: due now again.
REFRESH_RELEASE = "UPDATE feedback SET refresh_at = now() WHERE id = ANY($1::text[]) AND snapshot_source = 2"
# The anchor cannot be verified for the owner: the words and the client snapshot stay (source CLIENT),
# no spans are ever frozen (trace UNAVAILABLE). $2: the chat service said NOT_FOUND for the owner, so
# the snapshot is marked `unverified`.
REFRESH_GIVE_UP = """
UPDATE feedback SET refresh_at = NULL,
    snapshot = CASE WHEN $2 THEN snapshot || '{"unverified": true}'::jsonb ELSE snapshot END,
    trace_state = CASE WHEN trace_state = 1 THEN 3 ELSE trace_state END, next_capture_at = NULL,
    version = version + 1, update_time = GREATEST(now(), update_time)
WHERE id = $1 AND snapshot_source = 2"""

# ---- ratings
RATING_COLUMNS = """id, conversation, turn_index, owner, scope, aspect, artifact_id, sentiment, category, note, origin,
    message, version, create_time, update_time"""

GET_RATING_BY_KEY = f"""
SELECT {RATING_COLUMNS} FROM ratings
WHERE conversation = $1 AND turn_index = $2 AND owner = $3 AND scope = $4 AND aspect = $5 AND artifact_id = $6"""

# PutRating statements. $15: the request id (NULL: none), $16: its request fingerprint. `prior`: an earlier
# put with this request id (then nothing is written: the caller answers it as a retry); `rec` records an
# applied put's request id in the same statement. Always one row: seen / prior_fingerprint, then the
# written rating's columns (all NULL when nothing was written).
_RATING_PRIOR = """prior AS (
    SELECT request_fingerprint FROM rating_requests WHERE owner = $3 AND request_id = $15::uuid
)"""
_RATING_RECORD = """rec AS (
    INSERT INTO rating_requests (owner, request_id, rating_id, request_fingerprint, create_time)
    SELECT $3, $15::uuid, up.id, $16::bytea, now() FROM up WHERE $15::uuid IS NOT NULL
    ON CONFLICT (owner, request_id) DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM prior) AS seen, (SELECT request_fingerprint FROM prior) AS prior_fingerprint, up.*
FROM (VALUES (1)) AS one (x) LEFT JOIN up ON true"""

# Upsert without a precondition. $9..$11: whether this call owns sentiment / category / note (AIP-134: a new
# row gets the defaults for the others). A row whose owned fields already hold the values is not touched
# (no-op keeps version and times).
UPSERT_RATING = f"""
WITH {_RATING_PRIOR}, up AS (
    INSERT INTO ratings AS r (id, conversation, turn_index, owner, scope, aspect, artifact_id, sentiment, category,
        note, origin, message, version, create_time, update_time)
    SELECT $12::text, $1::text, $2::integer, $3::text, $4::smallint, $5::text, $6::text,
        CASE WHEN $9 THEN $7::smallint ELSE 0::smallint END, CASE WHEN $10 THEN $8::smallint ELSE 0::smallint END,
        CASE WHEN $11 THEN $13::text ELSE '' END, 1, $14::text, 1, now(), now()
    WHERE NOT EXISTS (SELECT 1 FROM prior)
    ON CONFLICT (conversation, turn_index, owner, scope, aspect, artifact_id) DO UPDATE SET
        sentiment = CASE WHEN $9 THEN EXCLUDED.sentiment ELSE r.sentiment END,
        category = CASE WHEN $10 THEN EXCLUDED.category ELSE r.category END,
        note = CASE WHEN $11 THEN EXCLUDED.note ELSE r.note END,
        origin = 1,
        message = CASE WHEN EXCLUDED.message = '' THEN r.message ELSE EXCLUDED.message END,
        version = r.version + 1,
        update_time = GREATEST(now(), r.update_time)
    WHERE ($9 AND r.sentiment IS DISTINCT FROM EXCLUDED.sentiment)
       OR ($10 AND r.category IS DISTINCT FROM EXCLUDED.category)
       OR ($11 AND r.note IS DISTINCT FROM EXCLUDED.note)
       OR r.origin <> 1
    RETURNING {RATING_COLUMNS}
), {_RATING_RECORD}"""

# Strict compare-and-swap: only when the stored version is $14 (even for a no-op, which then keeps
# version and times). No rating columns = stale etag (or no such rating).
_RATING_CHANGED = """(($9 AND r.sentiment IS DISTINCT FROM $7) OR ($10 AND r.category IS DISTINCT FROM $8)
    OR ($11 AND r.note IS DISTINCT FROM $12) OR r.origin <> 1)"""
CAS_RATING = f"""
WITH {_RATING_PRIOR}, up AS (
    UPDATE ratings AS r SET
        sentiment = CASE WHEN $9 THEN $7::smallint ELSE r.sentiment END,
        category = CASE WHEN $10 THEN $8::smallint ELSE r.category END,
        note = CASE WHEN $11 THEN $12 ELSE r.note END,
        origin = 1,
        message = CASE WHEN $13 = '' THEN r.message ELSE $13 END,
        version = r.version + CASE WHEN {_RATING_CHANGED} THEN 1 ELSE 0 END,
        update_time = CASE WHEN {_RATING_CHANGED} THEN GREATEST(now(), r.update_time) ELSE r.update_time END
    WHERE r.conversation = $1 AND r.turn_index = $2 AND r.owner = $3 AND r.scope = $4::smallint AND r.aspect = $5
      AND r.artifact_id = $6 AND r.version = $14 AND NOT EXISTS (SELECT 1 FROM prior)
    RETURNING {RATING_COLUMNS}
), {_RATING_RECORD}"""

PRUNE_RATING_REQUESTS = "DELETE FROM rating_requests WHERE create_time < now() - make_interval(secs => $1)"

DELETE_RATING = "DELETE FROM ratings WHERE id = $1 AND owner = $2"

LIST_RATINGS = f"""
SELECT {RATING_COLUMNS} FROM ratings
WHERE owner = $1 AND conversation = $2 AND ($3::int IS NULL OR turn_index = $3)
  AND ($4::int IS NULL OR (turn_index, scope, aspect, artifact_id) > ($4, $5, $6, $7))
ORDER BY turn_index, scope, aspect, artifact_id
LIMIT $8"""

# $5 / $6: the fork's turns that have a stored non-empty assistant message, and those messages' names: a
# MESSAGE rating is copied only onto such a turn (and names its message there); other scopes are copied as
# they are.
COPY_RATINGS = """
INSERT INTO ratings (id, conversation, turn_index, owner, scope, aspect, artifact_id, sentiment, category, note, origin,
    message, version, create_time, update_time)
SELECT md5(random()::text || clock_timestamp()::text || r.id), $2, r.turn_index, r.owner, r.scope, r.aspect,
    r.artifact_id, r.sentiment, r.category, r.note, 2, COALESCE(t.message, ''), 1, now(), now()
FROM ratings r
LEFT JOIN unnest($5::int[], $6::text[]) AS t (turn_index, message) ON t.turn_index = r.turn_index
WHERE r.owner = $1 AND r.conversation = $3 AND r.turn_index <= $4
  AND (r.scope <> 1 OR t.message IS NOT NULL)
ON CONFLICT (conversation, turn_index, owner, scope, aspect, artifact_id) DO NOTHING"""

# ---- statistics (operator scope; USER-origin ratings only)
STATS_ASPECTS = """
SELECT scope, aspect, count(*) AS total,
    count(*) FILTER (WHERE sentiment = 1) AS positive,
    count(*) FILTER (WHERE sentiment = 2) AS neutral,
    count(*) FILTER (WHERE sentiment = 3) AS negative
FROM ratings WHERE origin = 1 AND update_time >= $1
GROUP BY scope, aspect ORDER BY scope, aspect"""

STATS_CATEGORIES = """
SELECT category, count(*) AS count FROM feedback WHERE create_time >= $1 GROUP BY category ORDER BY category"""

STATS_RATING_TREND = """
SELECT (update_time AT TIME ZONE 'UTC')::date AS day,
    count(*) FILTER (WHERE sentiment = 1) AS positive,
    count(*) FILTER (WHERE sentiment = 2) AS neutral,
    count(*) FILTER (WHERE sentiment = 3) AS negative
FROM ratings WHERE origin = 1 AND update_time >= $1 GROUP BY 1"""

STATS_REPORT_TREND = """
SELECT (create_time AT TIME ZONE 'UTC')::date AS day, count(*) AS reports
FROM feedback WHERE create_time >= $1 GROUP BY 1"""

RECENT_RATINGS = f"""
SELECT {RATING_COLUMNS} FROM ratings
WHERE origin = 1
  AND ($1::smallint = 0 OR scope = $1) AND ($2 = '' OR aspect = $2) AND ($3::smallint = 0 OR sentiment = $3)
  AND ($4::smallint = 0 OR category = $4) AND ($5 = '' OR note ILIKE $5 ESCAPE '\\')
  AND (NOT $6 OR sentiment = 3)
  AND ($7::timestamptz IS NULL OR (update_time, id) < ($7, $8))
ORDER BY update_time DESC, id DESC LIMIT $9"""

RECENT_FEEDBACK = f"""
SELECT {FEEDBACK_COLUMNS} FROM feedback
WHERE ($1::smallint = 0 OR category = $1) AND ($2 = '' OR body ILIKE $2 ESCAPE '\\')
  AND (NOT $3 OR sentiment = 2)
  AND ($4::timestamptz IS NULL OR (create_time, id) < ($4, $5))
ORDER BY create_time DESC, id DESC LIMIT $6"""


def like_pattern(text: str) -> str:
    """A case-insensitive substring pattern for ILIKE with `\\` escaping ('' when no filter)."""
    if not text:
        return ""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(url: str, min_size: int, max_size: int) -> asyncpg.Pool:
    """The service's pool (schema `feedback`, UTC) with jsonb ↔ Python codecs on every connection.
    This service keeps no session state (no SET, LISTEN, session advisory lock or cursor outside a
    transaction), so connections go back to the pool without asyncpg's RESET round trip."""
    return await common_create_pool(url, "feedback", min_size=min_size, max_size=max_size, init=_init_connection,
                                    reset=skip_reset)


class Repository:
    """The feedback schema's reads and writes over one pool."""

    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    # ---- reports
    async def get_by_request_id(self, owner: str, request_id: uuid.UUID) -> asyncpg.Record | None:
        return await self.pool.fetchrow(GET_BY_REQUEST_ID, owner, request_id)

    async def get_deleted_create(self, owner: str, request_id: uuid.UUID,
                                 retention_s: float) -> asyncpg.Record | None:
        """(feedback_id, request_fingerprint) of the report this create request id made and a delete
        removed within `retention_s` seconds; None otherwise."""
        return await self.pool.fetchrow(GET_DELETED_CREATE, owner, request_id, retention_s)

    async def insert_feedback(self, row: dict[str, Any],
                              deleted_retention_s: float) -> tuple[asyncpg.Record | None, asyncpg.Record | None]:
        """Insert a report. Returns (stored, deleted), exactly one of them set:
        stored: the new row, or the first row of a concurrent retry with the same (owner, request_id);
        deleted: (feedback_id, request_fingerprint) when that request id's report was deleted within
        `deleted_retention_s` seconds — nothing is written. One statement for a new report."""
        args = (
            row["id"], row["owner"], row["request_id"], row["target_kind"], row["message"], row["coding_session"],
            row["coding_seq"], row["instance"], row["trace_id"], row["surface"], row["author"], row["body"],
            row["sentiment"], row["category"], row["snapshot"], row["snapshot_source"], row["turn_time"],
            row["trace_state"], row.get("request_fingerprint"), deleted_retention_s,
        )
        key = (row["owner"], row["request_id"])
        for _ in range(2):  # a deletion record expiring between two statements: claim it again
            got = await self.pool.fetchrow(INSERT_FEEDBACK, *args)
            if got is None:
                got = await self.pool.fetchrow(GET_BY_REQUEST_ID, *key)
            if got is not None:
                return got, None
            deleted = await self.pool.fetchrow(GET_DELETED_CREATE, *key, deleted_retention_s)
            if deleted is not None:
                return None, deleted
        raise RuntimeError(f"request id {row['request_id']} is claimed but neither stored nor deleted")

    async def get_feedback(self, fid: str, owner: str) -> asyncpg.Record | None:
        return await self.pool.fetchrow(GET_FEEDBACK, fid, owner)

    async def delete_feedback(self, fid: str, owner: str, request_id: uuid.UUID | None = None,
                              retention_s: float = 86400.0) -> tuple[bool, str | None]:
        """Delete the owner's row. Returns (deleted, earlier): `earlier` is the feedback id an earlier
        completed delete with this `request_id` removed (within `retention_s`), else None. Every
        delete stamps the ledger row of the request id that created the report; a delete with
        a request id is recorded too (owner, request id, id — no content); the owner's records older
        than `retention_s` are pruned."""
        async with self.pool.acquire() as conn, conn.transaction():
            if request_id is not None:
                earlier = await conn.fetchval(GET_DELETE_RECORD, owner, request_id, retention_s)
                if earlier is not None:
                    return False, earlier
            deleted = await conn.fetchval(DELETE_FEEDBACK, fid, owner) is not None
            if deleted:
                await conn.execute(PRUNE_DELETE_RECORDS, owner, retention_s)
                if request_id is not None:
                    await conn.execute(RECORD_DELETE, owner, request_id, fid)
            elif request_id is not None:
                # A concurrent retry with this request id may have deleted the row while this DELETE
                # waited for its lock: its record is committed now (a new statement sees it).
                return False, await conn.fetchval(GET_DELETE_RECORD, owner, request_id, retention_s)
            return deleted, None

    async def list_feedback(self, owner: str, f: dict[str, Any], after: tuple[dt.datetime, str] | None,
                            limit: int) -> list[asyncpg.Record]:
        return await self.pool.fetch(
            LIST_FEEDBACK, owner, f["instance"], f["status"], f["author"], f["sentiment"], f["category"],
            f["start_time"], f["end_time"], like_pattern(f["text"]), f["trace_id"],
            after[0] if after else None, after[1] if after else "", limit,
        )

    async def update_feedback(self, fid: str, owner: str, decide, request_id: uuid.UUID | None = None,
                              fingerprint: bytes | None = None, retention_s: float = 86400.0) -> asyncpg.Record | None:
        """Row-locked read-modify-write: `decide(current_row, earlier)` returns (status, issue_url) to
        write, or None to return the row unchanged (it may raise a
        DomainError to abort). `earlier`: the record (feedback_id, request_fingerprint) of an update
        already made with `request_id` within `retention_s`, else None. A new `request_id` is recorded
        (changed or not), and the owner's records older than `retention_s` pruned. None: no such row."""
        async with self.pool.acquire() as conn, conn.transaction():
            cur = await conn.fetchrow(LOCK_FEEDBACK, fid, owner)
            if cur is None:
                return None
            earlier = (await conn.fetchrow(GET_UPDATE_REQUEST, owner, request_id, retention_s)
                       if request_id is not None else None)
            change = decide(cur, earlier)
            row = cur if change is None else await conn.fetchrow(UPDATE_FEEDBACK, fid, owner, *change)
            if request_id is not None and earlier is None:
                await conn.execute(RECORD_UPDATE_REQUEST, owner, request_id, fid, fingerprint, retention_s)
            return row

    async def claim_filing(self, fid: str, owner: str, lease_s: float) -> asyncpg.Record | None:
        return await self.pool.fetchrow(CLAIM_FILING, fid, owner, lease_s)

    async def finish_filing(self, fid: str, owner: str, url: str) -> asyncpg.Record | None:
        return await self.pool.fetchrow(FINISH_FILING, fid, owner, url)

    async def release_filing(self, fid: str, owner: str) -> None:
        await self.pool.execute(RELEASE_FILING, fid, owner)

    # ---- capture worker
    async def claim_capture(self, limit: int, lease_s: float) -> list[asyncpg.Record]:
        return await self.pool.fetch(CLAIM_CAPTURE, limit, lease_s)

    async def capture_pending(self, fid: str, retry_in_s: float, span_count: int) -> None:
        await self.pool.execute(CAPTURE_PENDING, fid, retry_in_s, span_count)

    async def capture_done(self, fid: str, state: int, frozen: dict[str, Any], span_count: int) -> None:
        await self.pool.execute(CAPTURE_DONE, fid, state, frozen, span_count)

    async def capture_done_trace(self, owner: str, trace_id: str, state: int, frozen: dict[str, Any],
                                 span_count: int) -> int:
        status = await self.pool.execute(CAPTURE_DONE_TRACE, owner, trace_id, state, frozen, span_count)
        return int(status.rsplit(" ", 1)[-1])

    async def claim_refresh(self, limit: int, lease_s: float) -> list[asyncpg.Record]:
        return await self.pool.fetch(CLAIM_REFRESH, limit, lease_s)

    async def refresh_done(self, fid: str, snapshot: dict[str, Any], source: int, trace_id: str,
                           turn_time: dt.datetime | None, instance: str, message: str) -> asyncpg.Record | None:
        """Store the verified snapshot. Returns the row's event fields (id, trace_id, sentiment,
        category, author, message, instance, emit_created) — emit_created true once per row, when
        this call made its trace id authoritative — or None when the row was already verified."""
        return await self.pool.fetchrow(REFRESH_DONE, fid, snapshot, source, trace_id, turn_time, instance, message)

    async def refresh_release(self, ids: list[str]) -> None:
        """Make claimed client snapshots due now (for another replica), without counting an attempt."""
        await self.pool.execute(REFRESH_RELEASE, ids)

    async def refresh_give_up(self, fid: str, not_found: bool) -> None:
        """Stop verifying: no spans ever (trace UNAVAILABLE); `not_found` marks the snapshot unverified."""
        await self.pool.execute(REFRESH_GIVE_UP, fid, not_found)

    # ---- ratings
    async def get_rating(self, key: tuple) -> asyncpg.Record | None:
        return await self.pool.fetchrow(GET_RATING_BY_KEY, *key)

    async def upsert_rating(self, key: tuple, sentiment: int, category: int, note: str, mask: frozenset[str],
                            new_id: str, message: str, request_id: uuid.UUID | None = None,
                            fingerprint: bytes | None = None) -> asyncpg.Record:
        """Upsert (one statement). Returns a record with `seen` / `prior_fingerprint` (an earlier put
        with `request_id`: nothing was written) and the written rating's columns (`id` None when nothing
        was written: a retry, or a no-op that kept the row as it was)."""
        return await self.pool.fetchrow(
            UPSERT_RATING, *key, sentiment, category, "sentiment" in mask, "category" in mask, "note" in mask,
            new_id, note, message, request_id, fingerprint,
        )

    async def cas_rating(self, key: tuple, sentiment: int, category: int, note: str, mask: frozenset[str],
                         message: str, version: int, request_id: uuid.UUID | None = None,
                         fingerprint: bytes | None = None) -> asyncpg.Record:
        """Conditional update at `version` (one statement); the record as `upsert_rating`'s, `id` None
        when the stored version differs (or no row) or it is a retry (`seen`)."""
        return await self.pool.fetchrow(
            CAS_RATING, *key, sentiment, category, "sentiment" in mask, "category" in mask, "note" in mask,
            note, message, version, request_id, fingerprint,
        )

    async def prune_rating_requests(self, retention_s: float) -> int:
        """Forget PutRating request ids older than `retention_s`; returns how many."""
        return int((await self.pool.execute(PRUNE_RATING_REQUESTS, retention_s)).split()[-1])

    async def delete_rating(self, rid: str, owner: str) -> None:
        await self.pool.execute(DELETE_RATING, rid, owner)

    async def list_ratings(self, owner: str, conversation: str, turn_index: int | None,
                           after: list | None, limit: int) -> list[asyncpg.Record]:
        a = after or [None, 0, "", ""]
        return await self.pool.fetch(LIST_RATINGS, owner, conversation, turn_index, a[0], a[1], a[2], a[3], limit)

    async def copy_ratings(self, owner: str, source: str, target: str, through: int,
                           target_replies: dict[int, str]) -> int:
        """Copy; MESSAGE ratings only onto `target_replies` turns (turn index → assistant message name)."""
        turns = list(target_replies)
        status = await self.pool.execute(COPY_RATINGS, owner, target, source, through, turns,
                                         [target_replies[t] for t in turns])
        return int(status.rsplit(" ", 1)[-1])

    async def stats(self, since: dt.datetime) -> dict[str, list[asyncpg.Record]]:
        async with self.pool.acquire() as conn:
            return {
                "aspects": await conn.fetch(STATS_ASPECTS, since),
                "categories": await conn.fetch(STATS_CATEGORIES, since),
                "rating_trend": await conn.fetch(STATS_RATING_TREND, since),
                "report_trend": await conn.fetch(STATS_REPORT_TREND, since),
            }

    async def recent(self, f: dict[str, Any], after: tuple[dt.datetime, str] | None, limit: int,
                     ratings: bool, reports: bool) -> tuple[list[asyncpg.Record], list[asyncpg.Record]]:
        t, i = (after if after else (None, ""))
        pattern = like_pattern(f["text"])
        r = await self.pool.fetch(RECENT_RATINGS, f["scope"], f["aspect"], f["sentiment"], f["category"], pattern,
                                  f["negative_only"], t, i, limit) if ratings else []
        fb = await self.pool.fetch(RECENT_FEEDBACK, f["category"], pattern, f["negative_only"], t, i,
                                   limit) if reports else []
        return r, fb
