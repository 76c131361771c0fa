"""The capture worker's queues: SQL over table `feedback` (PENDING rows, CLIENT snapshots to verify).

The worker claims rows with `FOR UPDATE SKIP LOCKED` plus a lease (pushing the due time forward), so
several replicas share the queue and no connection is held while the collector or the chat service is
called. Guards that keep spans out of unverified rows stay in the statements (they must hold against a
concurrent writer); the states to write arrive decided (`evidence.decide_capture`, `domain.capture_plan`).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import asyncpg

from services.common import ledger
from services.common.db import NamedSQL
from services.feedback.model.capture import CaptureJob, VerifyJob
from services.feedback.model.enums import Author, Category, Sentiment, SnapshotSource, TraceState
from services.feedback.model.report import Anchor, CreatedEvent, FrozenTrace, Snapshot
from services.feedback.repository import rows
from services.feedback.repository.reports import PRUNE_DELETED_CREATES

# The queues' states are written into their statements, not passed: their partial indexes
# (feedback_capture_queue, feedback_capture_recheck, feedback_snapshot_refresh) name the constants, and a
# prepared statement's generic plan, which PostgreSQL may switch to after five runs, can use a partial
# index only when the WHERE clause itself implies the index's predicate; with `trace_state = $1` every
# poll of every replica would read the whole table (tests/integration/test_feedback_repository.py).
_PENDING, _CAPTURED, _CLIENT = int(TraceState.PENDING), int(TraceState.CAPTURED), int(SnapshotSource.CLIENT)

# Claim due PENDING rows (and CAPTURED copies frozen incomplete, looked at again: next_capture_at set) whose anchor the chat service gave: lease them by pushing next_capture_at forward.
CLAIM_CAPTURE = NamedSQL(f"""
WITH due AS (
    SELECT id FROM feedback
    WHERE (trace_state = {_PENDING} OR trace_state = {_CAPTURED}) AND next_capture_at <= now()
      AND snapshot_source <> {_CLIENT}
    ORDER BY next_capture_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE feedback f SET next_capture_at = now() + make_interval(secs => :lease_s),
    capture_attempts = capture_attempts + 1
FROM due WHERE f.id = due.id
RETURNING f.id, f.owner, f.trace_id, f.turn_time, f.capture_attempts, f.capture_span_count, f.trace_state""")

CAPTURE_BACKLOG = f"SELECT count(*) AS n, min(create_time) AS oldest FROM feedback WHERE trace_state = {_PENDING}"

CAPTURE_PENDING = """
UPDATE feedback SET next_capture_at = now() + make_interval(secs => $2), capture_span_count = $3
WHERE id = $1 AND trace_state = $4"""

# Settle one row. Guard: a CLIENT row never receives spans (CAPTURED), whoever wrote last.
CAPTURE_DONE = NamedSQL("""
UPDATE feedback SET trace_state = :state::smallint, trace_snapshot = :frozen, capture_span_count = :span_count,
    capture_time = now(), next_capture_at = now() + make_interval(secs => :recheck_s),
    version = version + 1, update_time = GREATEST(now(), update_time)
WHERE id = :id AND (trace_state = :pending OR (trace_state = :captured AND next_capture_at IS NOT NULL))
  AND (snapshot_source <> :client OR :state <> :captured)""")

# Once a turn is frozen (or known expired) for one report, every other PENDING report of the same
# owner on that turn gets the same copy (one look at the collector serves them all) — except rows whose
# CLIENT snapshot the chat service has not verified yet (they never receive spans). Rows are locked in
# id order, skipping rows another worker is writing right now (two replicas settling the same turn
# deadlocked otherwise; a skipped row is settled on its own next look).
CAPTURE_DONE_TRACE = NamedSQL("""
WITH mine AS (
    SELECT id FROM feedback
    WHERE owner = :owner AND trace_id = :trace_id AND snapshot_source <> :client
      AND (trace_state = :pending OR (trace_state = :captured AND next_capture_at IS NOT NULL))
    ORDER BY id FOR UPDATE SKIP LOCKED
)
UPDATE feedback f SET trace_state = :state::smallint, trace_snapshot = :frozen, capture_span_count = :span_count,
    capture_time = now(), next_capture_at = now() + make_interval(secs => :recheck_s),
    version = f.version + 1, update_time = GREATEST(now(), f.update_time)
FROM mine WHERE f.id = mine.id""")

# An incomplete copy with nothing new: look again at `$2` seconds from now (NULL: stop looking).
CAPTURE_RECHECK = """
UPDATE feedback SET next_capture_at = now() + make_interval(secs => $2)
WHERE id = $1 AND trace_state = $3 AND next_capture_at IS NOT NULL"""

# Client snapshots waiting for the authoritative one (chat service was down at create time).
CLAIM_REFRESH = f"""
WITH due AS (
    SELECT id FROM feedback
    WHERE snapshot_source = {_CLIENT} AND refresh_at <= now()
    ORDER BY refresh_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE feedback f SET refresh_at = now() + make_interval(secs => $2)
FROM due WHERE f.id = due.id
RETURNING f.id, f.owner, f.target_kind, f.message, f.instance, f.trace_id, f.coding_session, f.coding_seq"""

# The chat service confirmed the anchor for the owner: its snapshot, trace id, time, instance and
# message replace the client's (the client's trace id is never kept); a still PENDING row takes the
# planned state (`domain.capture_plan`). The same statement marks `feedback.created` as emitted and
# returns `emit_created` true exactly once per row (only one verification matches `snapshot_source`).
# A workspace component the report names (issue 23) is kept as it was stored (named, not frozen).
REFRESH_DONE = NamedSQL("""
WITH cur AS (SELECT id, created_event_time FROM feedback WHERE id = :id AND snapshot_source = :client FOR UPDATE)
UPDATE feedback f SET snapshot = :snapshot::jsonb || jsonb_strip_nulls(jsonb_build_object('component', f.snapshot->'component')),
    snapshot_source = :source, trace_id = :trace_id,
    turn_time = COALESCE(:turn_time, f.turn_time), instance = COALESCE(NULLIF(:instance, ''), f.instance),
    message = COALESCE(NULLIF(:message, ''), f.message),
    trace_state = CASE WHEN f.trace_state = :pending THEN :state ELSE f.trace_state END,
    refresh_at = NULL,
    next_capture_at = CASE WHEN f.trace_state = :pending AND :capture_due THEN now() END,
    created_event_time = COALESCE(cur.created_event_time, CASE WHEN :authoritative THEN now() END),
    version = f.version + 1, update_time = GREATEST(now(), f.update_time)
FROM cur WHERE f.id = cur.id AND f.snapshot_source = :client
RETURNING f.id, f.trace_id, f.sentiment, f.category, f.author, f.message, f.instance,
    (:authoritative AND cur.created_event_time IS NULL) AS emit_created""")

# Claimed client snapshots handed back by a replica that cannot reach the chat service: due now again.
REFRESH_RELEASE = "UPDATE feedback SET refresh_at = now() WHERE id = ANY($1::text[]) AND snapshot_source = $2"

# The anchor cannot be verified for the owner: the words and the client snapshot stay (source CLIENT),
# no spans are ever frozen (a still PENDING row becomes UNAVAILABLE). `:mark` is merged into the
# snapshot (`{"unverified": true}` when the chat service said NOT_FOUND for the owner).
REFRESH_GIVE_UP = NamedSQL("""
UPDATE feedback SET refresh_at = NULL, snapshot = snapshot || :mark::jsonb,
    trace_state = CASE WHEN trace_state = :pending THEN :unavailable ELSE trace_state END, next_capture_at = NULL,
    version = version + 1, update_time = GREATEST(now(), update_time)
WHERE id = :id AND snapshot_source = :client""")

_GUARDS = {"pending": TraceState.PENDING, "captured": TraceState.CAPTURED, "client": SnapshotSource.CLIENT,
           "unavailable": TraceState.UNAVAILABLE}


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


@dataclass
class CaptureStore:
    """The capture worker's reads and writes over `pool`, and the hourly prune of the request ledgers."""

    pool: asyncpg.Pool

    async def capture_backlog(self) -> tuple[int, dt.datetime | None]:
        """(reports whose trace snapshot is PENDING, the oldest one's create_time) — for the metrics."""
        r = await self.pool.fetchrow(CAPTURE_BACKLOG)
        return int(r["n"]), r["oldest"]

    async def claim_capture(self, limit: int, lease_s: float) -> list[CaptureJob]:
        got = await self.pool.fetch(*CLAIM_CAPTURE.bind({"limit": limit, "lease_s": lease_s}))
        return [CaptureJob(r["id"], r["owner"], r["trace_id"], r["turn_time"], r["capture_attempts"],
                           r["capture_span_count"], TraceState(r["trace_state"])) for r in got]

    async def capture_recheck(self, fid: str, recheck_in_s: float | None) -> None:
        """An incomplete copy without new spans: look again in `recheck_in_s` (None: never again)."""
        await self.pool.execute(CAPTURE_RECHECK, fid, recheck_in_s, TraceState.CAPTURED)

    async def capture_pending(self, fid: str, retry_in_s: float, span_count: int) -> None:
        await self.pool.execute(CAPTURE_PENDING, fid, retry_in_s, span_count, TraceState.PENDING)

    async def capture_done(self, fid: str, state: TraceState, frozen: FrozenTrace | None, span_count: int,
                           recheck_in_s: float | None = None) -> None:
        """Settle one row; `recheck_in_s` (an incomplete copy): look again then (None: done)."""
        values = {**_GUARDS, "id": fid, "state": state, "frozen": rows.frozen_json(frozen) if frozen else {},
                  "span_count": span_count, "recheck_s": recheck_in_s}
        await self.pool.execute(*CAPTURE_DONE.bind(values))

    async def capture_done_trace(self, owner: str, trace_id: str, state: TraceState, frozen: FrozenTrace | None,
                                 span_count: int, recheck_in_s: float | None = None) -> int:
        """Settle every PENDING (or incomplete) verified row of `owner` on `trace_id`; returns how many."""
        values = {**_GUARDS, "owner": owner, "trace_id": trace_id, "state": state,
                  "frozen": rows.frozen_json(frozen) if frozen else {}, "span_count": span_count,
                  "recheck_s": recheck_in_s}
        return _count(await self.pool.execute(*CAPTURE_DONE_TRACE.bind(values)))

    async def claim_refresh(self, limit: int, lease_s: float) -> list[VerifyJob]:
        got = await self.pool.fetch(CLAIM_REFRESH, limit, lease_s)
        return [VerifyJob(r["id"], r["owner"], rows.anchor(r)) for r in got]

    async def refresh_done(self, fid: str, snapshot: Snapshot, state: TraceState, capture_due: bool,
                           authoritative: bool, turn_time: dt.datetime | None, anchor: Anchor) -> CreatedEvent | None:
        """Store the verified snapshot (source CHAT_SERVICE) and anchor. Returns the `feedback.created`
        event's fields when this call made the row's trace id authoritative (once per row, however many
        workers verify it), else None (also when the row was already verified)."""
        values = {**_GUARDS, "id": fid, "snapshot": rows.snapshot_json(snapshot), "source": snapshot.source,
                  "trace_id": anchor.trace_id, "turn_time": turn_time, "instance": anchor.instance,
                  "message": anchor.message, "state": state, "capture_due": capture_due,
                  "authoritative": authoritative}
        r = await self.pool.fetchrow(*REFRESH_DONE.bind(values))
        if r is None or not r["emit_created"]:
            return None
        return CreatedEvent(r["id"], r["trace_id"], Sentiment(r["sentiment"]), Category(r["category"]),
                            Author(r["author"]), r["message"], r["instance"])

    async def refresh_release(self, ids: list[str]) -> None:
        """Make claimed client snapshots due now (for another replica), without counting an attempt."""
        await self.pool.execute(REFRESH_RELEASE, ids, SnapshotSource.CLIENT)

    async def refresh_give_up(self, fid: str, not_found: bool) -> None:
        """Stop verifying: no spans ever (trace UNAVAILABLE); `not_found` marks the snapshot unverified."""
        values = {**_GUARDS, "id": fid, "mark": {"unverified": True} if not_found else {}}
        await self.pool.execute(*REFRESH_GIVE_UP.bind(values))

    async def prune_requests(self, retention_s: float) -> int:
        """The hourly pass of the one prune policy: request-ledger records and create-ledger deletion
        stamps older than `retention_s`; returns how many records went."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(PRUNE_DELETED_CREATES, retention_s)
            return await ledger.prune(conn, retention_s)
