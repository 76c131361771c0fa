"""Reports: SQL of table `feedback` and its request ledgers, and the store that runs it.

SQL keeps keys, constraints and concurrency guards; the rules (which state a new report starts in,
whether its `feedback.created` event is due, …) arrive decided, as parameters (`model.NewReport`),
and enum values are bound by name (`Status.FILED`), never written as numbers.

Concurrency: an idempotent create first claims its (owner, request_id) in `feedback_create_requests`
(`INSERT … ON CONFLICT`, in the same statement as the row), a ledger that DeleteFeedback only stamps,
so no retry — not even one racing the delete — writes a second row.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import asyncpg

from services.common.db import NamedSQL, fetch_custom_plan, like_pattern
from services.common.ledger import Ledger
from services.feedback.model.audit import AuditEntry
from services.feedback.model.enums import SnapshotSource, Status, TraceState
from services.feedback.model.report import Claim, DeletedCreate, NewReport, OverCap, Report, ReportFilter, Stored
from services.feedback.repository import rows, text_search
from services.feedback.repository.audit import insert_audit
from services.feedback.repository.claims import NOT_CLAIMED_BY_OTHERS, live_claim

FEEDBACK_COLUMNS = """id, owner, request_id, target_kind, message, coding_session, coding_seq, instance, trace_id,
    surface, author, body, sentiment, category, snapshot, snapshot_source, turn_time, trace_state, trace_snapshot,
    capture_attempts, capture_span_count, next_capture_at, capture_time, status, issue_url, filing_until, version,
    create_time, update_time, context_trace_id, turn_removed_time"""

GET_BY_REQUEST_ID = f"""SELECT {FEEDBACK_COLUMNS}, request_fingerprint, created_event_time FROM feedback
WHERE owner = $1 AND request_id = $2"""

# The report a CreateFeedback request id created and DeleteFeedback removed, within $3 seconds.
GET_DELETED_CREATE = """
SELECT feedback_id, request_fingerprint FROM feedback_create_requests
WHERE owner = $1 AND request_id = $2 AND delete_time > now() - make_interval(secs => $3)"""

# The request id is claimed in the ledger first: taken (a live report, or one deleted less than
# `retention_s` seconds ago) → no row. A deletion record older than that is recycled (a new report).
# `copy_sibling`: the newest CAPTURED report of the same owner on the turn whose anchor the chat
# service gave (never a CLIENT one) lends its frozen copy; the new row is then born with its state.
_INSERT_FEEDBACK = f"""
WITH {{counted}}claim AS (
    INSERT INTO feedback_create_requests AS r (owner, request_id, feedback_id, request_fingerprint, delete_time)
    {{claimed}}
    ON CONFLICT (owner, request_id) DO UPDATE SET feedback_id = EXCLUDED.feedback_id,
        request_fingerprint = EXCLUDED.request_fingerprint, delete_time = NULL
    WHERE r.delete_time <= now() - make_interval(secs => :retention_s)
    RETURNING 1
)
INSERT INTO feedback (id, owner, request_id, target_kind, message, coding_session, coding_seq, instance, trace_id,
    surface, author, body, sentiment, category, snapshot, snapshot_source, turn_time, trace_state, next_capture_at,
    refresh_at, trace_snapshot, capture_span_count, capture_time, create_time, update_time, request_fingerprint,
    created_event_time, context_trace_id)
SELECT :id, :owner, :request_id, :target_kind, :message, :coding_session, :coding_seq, :instance, :trace_id,
    :surface, :author, :body, :sentiment, :category, :snapshot, :snapshot_source, :turn_time,
    COALESCE(sib.trace_state, :trace_state::smallint),
    CASE WHEN :capture_due AND sib.id IS NULL THEN now() END,
    CASE WHEN :verify_due THEN now() END,
    COALESCE(sib.trace_snapshot, '{{{{}}}}'::jsonb), COALESCE(sib.capture_span_count, -1), sib.capture_time, now(), now(),
    :fingerprint, CASE WHEN :authoritative THEN now() END, :context_trace_id
FROM claim
LEFT JOIN LATERAL (
    SELECT id, trace_state, trace_snapshot, capture_span_count, capture_time FROM feedback
    WHERE :copy_sibling AND owner = :owner AND trace_id = :trace_id::text AND trace_state = :captured::smallint
      AND snapshot_source <> :client::smallint
    ORDER BY capture_time DESC LIMIT 1
) AS sib ON true
ON CONFLICT (owner, request_id) DO NOTHING
RETURNING {FEEDBACK_COLUMNS}, request_fingerprint, created_event_time{{returned}}"""
INSERT_FEEDBACK = NamedSQL(_INSERT_FEEDBACK.format(
    counted="", claimed="VALUES (:owner, :request_id, :id, :fingerprint, NULL)", returned=""))
# The same under the stored-report cap `:cap`: the request id is claimed (and the row inserted) only
# while the owner has fewer than `:cap` reports; RETURNING says how many it had. Run under the owner's
# lock (LOCK_OWNER_REPORTS, an earlier statement of the transaction), so the count sees every report
# the lock's previous holder stored: count and insert of one owner never interleave.
INSERT_FEEDBACK_CAPPED = NamedSQL(_INSERT_FEEDBACK.format(
    counted="counted AS (SELECT count(*) AS n FROM (SELECT 1 FROM feedback WHERE owner = :owner LIMIT :cap) AS s),\n",
    claimed="SELECT :owner::text, :request_id::uuid, :id::text, :fingerprint::bytea, NULL::timestamptz FROM counted "
            "WHERE counted.n < :cap",
    returned=", (SELECT n FROM counted) AS counted"))
# An owner's lock on their stored-report count, held to the end of the transaction. The two-key form
# keeps it apart from the single-key advisory locks of migrations and partitions.
LOCK_OWNER_REPORTS = "SELECT pg_advisory_xact_lock(hashtext('feedback.report_cap'), hashtext($1))"

GET_FEEDBACK = f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE id = $1 AND owner = $2"

LOCK_FEEDBACK = f"""SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE id = $1 AND owner = $2 FOR UPDATE"""

UPDATE_FEEDBACK = f"""
UPDATE feedback SET status = $3, issue_url = $4,
    version = version + 1, update_time = GREATEST(now(), update_time)
WHERE id = $1 AND owner = $2
RETURNING {FEEDBACK_COLUMNS}"""

# Hard delete; the ledger row of the request id that created it is stamped deleted (no content), so a
# late retry of that create writes nothing. Returns the deleted id (no row: nothing deleted).
DELETE_FEEDBACK = """
WITH gone AS (DELETE FROM feedback WHERE id = $1 AND owner = $2 RETURNING owner, request_id, id, request_fingerprint)
INSERT INTO feedback_create_requests (owner, request_id, feedback_id, request_fingerprint, delete_time)
SELECT owner, request_id, id, request_fingerprint, now() FROM gone
ON CONFLICT (owner, request_id) DO UPDATE SET feedback_id = EXCLUDED.feedback_id,
    request_fingerprint = EXCLUDED.request_fingerprint, delete_time = EXCLUDED.delete_time
RETURNING feedback_id"""

# The create ledger's deletion stamps expire with the request ledger's retention (one prune policy:
# services/common/ledger.py; run by the capture worker's hourly pass).
PRUNE_DELETED_CREATES = """
DELETE FROM feedback_create_requests WHERE delete_time <= now() - make_interval(secs => $1)"""

# Filters are optional (empty / 0 / NULL = not applied); keyset paging on (create_time, id), newest first.
_LIST_WHERE = """owner = :owner
  AND (:instance = '' OR instance = :instance)
  AND (:status::smallint = 0 OR status = :status)
  AND (:author::smallint = 0 OR author = :author)
  AND (:sentiment::smallint = 0 OR sentiment = :sentiment)
  AND (:category::smallint = 0 OR category = :category)
  AND (:start_time::timestamptz IS NULL OR create_time >= :start_time)
  AND (:end_time::timestamptz IS NULL OR create_time < :end_time)
  AND (:trace_id = '' OR trace_id = :trace_id)
  AND (:after_time::timestamptz IS NULL OR (create_time, id) < (:after_time, :after_id))"""
LIST_FEEDBACK = NamedSQL(f"""
SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE {_LIST_WHERE}
ORDER BY create_time DESC, id DESC
LIMIT :limit""")
# With `text` (the body or the target text contains it): repository/text_search.py. Step 3 finds the
# quoted texts that contain it through the side index of migration 0095: the owner's indexed quotes
# matching, the owner's pending reports, and (only while the side table is not built: after a crash,
# until the quote indexer rebuilt it) every report of the owner; each candidate is then tested on its
# own text, so a stale or missing side row never changes the answer. As one array of ids, the pieces
# stay one BitmapOr with the body's index: the work follows the matches, never the owner's reports.
QUOTE_CANDIDATES = """(body ILIKE :text ESCAPE '\\' OR (id = ANY (ARRAY(
    SELECT q.id FROM feedback_quotes q WHERE q.owner = :owner AND q.quote ILIKE :text ESCAPE '\\'
    UNION ALL SELECT p.id FROM feedback_quotes_pending p WHERE p.owner = :owner
    UNION ALL SELECT r.id FROM feedback r WHERE NOT EXISTS (SELECT FROM feedback_quotes_built)
        AND r.owner = :owner AND r.snapshot->>'target_text' ILIKE :text ESCAPE '\\'))
  AND snapshot->>'target_text' ILIKE :text ESCAPE '\\'))"""
LIST_FEEDBACK_TEXT = text_search.statements(
    FEEDBACK_COLUMNS, "feedback", _LIST_WHERE,
    "(body ILIKE :text ESCAPE '\\' OR snapshot->>'target_text' ILIKE :text ESCAPE '\\')", "create_time",
    indexed=QUOTE_CANDIDATES)

# FileFeedback: take the filing claim (only one filer talks to the tracker at a time), never past another
# review session's live claim ($4, $5: the caller's sub and review session).
CLAIM_FILING = f"""
UPDATE feedback SET filing_until = now() + make_interval(secs => $3)
WHERE id = $1 AND owner = $2 AND issue_url = '' AND (filing_until IS NULL OR filing_until < now())
  AND {NOT_CLAIMED_BY_OTHERS.format(claimant=4, session=5)}
RETURNING {FEEDBACK_COLUMNS}"""

FINISH_FILING = f"""
UPDATE feedback SET issue_url = $3, status = $4, filing_until = NULL, version = version + 1,
    update_time = GREATEST(now(), update_time)
WHERE id = $1 AND owner = $2
RETURNING {FEEDBACK_COLUMNS}"""

RELEASE_FILING = "UPDATE feedback SET filing_until = NULL WHERE id = $1 AND owner = $2"
COUNT_REPORTS = "SELECT count(*) FROM (SELECT 1 FROM feedback WHERE owner = $1 LIMIT $2) AS s"
# A retry's answer exists (the write quota lets it through): a live report, or a deletion within $3 s.
CREATE_ANSWERED = """
SELECT EXISTS (SELECT 1 FROM feedback WHERE owner = $1 AND request_id = $2)
    OR EXISTS (SELECT 1 FROM feedback_create_requests
               WHERE owner = $1 AND request_id = $2 AND delete_time > now() - make_interval(secs => $3))"""


def _report(r: asyncpg.Record | None) -> Report | None:
    return rows.report(r) if r is not None else None


def _stored(r: asyncpg.Record) -> Stored:
    return Stored(rows.report(r), r["request_fingerprint"], r["created_event_time"] is not None)


@dataclass
class ReportStore:
    """Reads and writes of reports and their request ledgers over `pool` (the Reports use case's store)."""

    pool: asyncpg.Pool

    async def get_by_request_id(self, owner: str, request_id: uuid.UUID, db: Any = None) -> Stored | None:
        """The report stored under (owner, request_id), with its fingerprint; None when there is none.
        `db`: the connection of a transaction to read in (default: the pool)."""
        r = await (db or self.pool).fetchrow(GET_BY_REQUEST_ID, owner, request_id)
        return Stored(rows.report(r), r["request_fingerprint"], False) if r is not None else None

    async def get_deleted_create(self, owner: str, request_id: uuid.UUID, retention_s: float,
                                 db: Any = None) -> DeletedCreate | None:
        """The report this create request id made and a delete removed within `retention_s` seconds."""
        r = await (db or self.pool).fetchrow(GET_DELETED_CREATE, owner, request_id, retention_s)
        return DeletedCreate(r["feedback_id"], r["request_fingerprint"]) if r is not None else None

    async def create_answered(self, owner: str, request_id: uuid.UUID, retention_s: float) -> bool:
        """Whether this create request id has an answer: its report, or its report's deletion within
        `retention_s` seconds (a retry of it writes nothing)."""
        return await self.pool.fetchval(CREATE_ANSWERED, owner, request_id, retention_s)

    async def request_recorded(self, method: str, owner: str, request_id: uuid.UUID, retention_s: float) -> bool:
        """Whether the request ledger holds a live record of `method`'s `request_id` (a retry's answer)."""
        return await Ledger(method, retention_s).get(self.pool, owner, request_id) is not None

    async def insert_report(self, new: NewReport, retention_s: float,
                            cap: int | None = None) -> Stored | DeletedCreate | OverCap:
        """Insert a report. Returns the row stored under the request id (`report.id` differs from
        `new.id` when a concurrent call with that request id stored first), or the DeletedCreate when
        that request id's report was deleted within `retention_s` seconds (then nothing is written).

        `cap` None: one statement. `cap` n: a transaction under the owner's lock (LOCK_OWNER_REPORTS;
        concurrent capped inserts of one owner wait for each other, on every replica): the request id
        looked up again and the count taken under the lock, the report inserted only while the owner
        has fewer than n (`Stored.counted`: how many they had), else OverCap (nothing written)."""
        a = new.anchor
        values: dict[str, Any] = {
            "id": new.id, "owner": new.owner, "request_id": new.request_id, "fingerprint": new.fingerprint,
            "retention_s": retention_s, "target_kind": a.kind, "message": a.message,
            "coding_session": a.coding_session, "coding_seq": a.coding_seq, "instance": a.instance,
            "trace_id": a.trace_id, "surface": new.surface, "author": new.author, "body": new.body,
            "sentiment": new.sentiment, "category": new.category, "snapshot": rows.snapshot_json(new.snapshot)
            if new.snapshot.source != SnapshotSource.NONE else {}, "snapshot_source": new.snapshot.source,
            "turn_time": new.turn_time, "trace_state": new.trace_state, "capture_due": new.capture_due,
            "verify_due": new.verify_due, "authoritative": new.authoritative, "copy_sibling": new.copy_sibling,
            "captured": TraceState.CAPTURED, "client": SnapshotSource.CLIENT,
            "context_trace_id": new.context_trace_id, "cap": cap,
        }
        if cap is None:
            return await self._insert(self.pool, INSERT_FEEDBACK.bind(values), new, retention_s, None)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(LOCK_OWNER_REPORTS, new.owner)
            return await self._insert(conn, INSERT_FEEDBACK_CAPPED.bind(values), new, retention_s, cap)

    async def _insert(self, db: Any, bound: tuple[Any, ...], new: NewReport,
                      retention_s: float, cap: int | None) -> Stored | DeletedCreate | OverCap:
        for _ in range(2):  # a deletion record expiring between two statements: claim it again
            got = await db.fetchrow(*bound)
            if got is not None:
                return replace(_stored(got), counted=got["counted"]) if cap is not None else _stored(got)
            prior = await self.get_by_request_id(new.owner, new.request_id, db)
            if prior is not None:
                return prior
            deleted = await self.get_deleted_create(new.owner, new.request_id, retention_s, db)
            if deleted is not None:
                return deleted
            if cap is not None and await db.fetchval(COUNT_REPORTS, new.owner, cap) >= cap:
                return OverCap(cap)
        raise RuntimeError(f"request id {new.request_id} is claimed but neither stored nor deleted")

    async def get_report(self, fid: str, owner: str) -> Report | None:
        return _report(await self.pool.fetchrow(GET_FEEDBACK, fid, owner))

    async def delete_report(self, fid: str, owner: str, request_id: uuid.UUID | None,
                            retention_s: float, audit: AuditEntry | None = None) -> tuple[bool, str | None]:
        """Delete the owner's report. Returns (deleted, earlier): `earlier` is the id an earlier
        completed delete with this `request_id` removed (request ledger `DeleteFeedback`, kept
        `retention_s`), else None. Every delete stamps the ledger row of the request id that created the report."""
        async with self.pool.acquire() as conn, conn.transaction():
            ledger = Ledger("DeleteFeedback", retention_s)
            if request_id is not None:
                earlier = await ledger.get(conn, owner, request_id)
                if earlier is not None:
                    return False, earlier.resource
            deleted = await conn.fetchval(DELETE_FEEDBACK, fid, owner) is not None
            if deleted:
                await insert_audit(conn, [audit] if audit else [])
                if request_id is not None:
                    await ledger.record(conn, owner, request_id, fid, None)
            elif request_id is not None:
                # A concurrent retry with this request id may have deleted the row while this DELETE
                # waited for its lock: its record is committed now (a new statement sees it).
                earlier = await ledger.get(conn, owner, request_id)
                return False, earlier.resource if earlier is not None else None
            return deleted, None

    async def list_reports(self, owner: str, f: ReportFilter, after: tuple[Any, str] | None,
                           limit: int) -> list[Report]:
        """The owner's reports matching `f`, newest first (create_time, id) after the keyset `after`, at
        most `limit`; a text search in bounded steps (`text_search.fetch_matches`)."""
        values = {
            "owner": owner, "instance": f.instance, "status": f.status, "author": f.author, "sentiment": f.sentiment,
            "category": f.category, "start_time": f.start_time, "end_time": f.end_time,
            "text": like_pattern(f.text), "trace_id": f.trace_id, "after_time": after[0] if after else None,
            "after_id": after[1] if after else "", "limit": limit,
        }
        if not f.text:
            return [rows.report(r) for r in await fetch_custom_plan(self.pool, *LIST_FEEDBACK.bind(values))]
        return [rows.report(r) for r in await text_search.fetch_matches(self.pool, LIST_FEEDBACK_TEXT, values)]

    async def update_report(self, fid: str, owner: str, decide: Callable[[Report, Any], tuple[Status, str] | None],
                            request_id: uuid.UUID | None, fingerprint: bytes | None,
                            retention_s: float, audit: Callable[[Report, Report], AuditEntry] | None = None,
                            ) -> Report | None:
        """Row-locked read-modify-write: `decide(current, earlier)` (`current` with its live review claim) returns (status, issue_url) to write,
        or None to keep the report as it is (it may raise a DomainError to abort). `earlier`: the ledger entry
        (`UpdateFeedback`: resource = the report id, fingerprint) of an update already made with
        `request_id`, else None. A new
        `request_id` is recorded (changed or not). None: no such report."""
        async with self.pool.acquire() as conn, conn.transaction():
            cur = await conn.fetchrow(LOCK_FEEDBACK, fid, owner)
            if cur is None:
                return None
            ledger = Ledger("UpdateFeedback", retention_s)
            earlier = await ledger.get(conn, owner, request_id) if request_id is not None else None
            # Read under the row lock ClaimFeedback also takes: a claim committed before is seen here.
            current = replace(rows.report(cur), claim=await live_claim(conn, fid))
            change = decide(current, earlier)
            if change is None:
                out = current
            else:
                out = replace(rows.report(await conn.fetchrow(UPDATE_FEEDBACK, fid, owner, *change)), claim=current.claim)
                await insert_audit(conn, [audit(current, out)] if audit else [])
            if request_id is not None and earlier is None:
                await ledger.record(conn, owner, request_id, fid, fingerprint)
            return out

    async def claim_filing(self, fid: str, owner: str, lease_s: float, claimant: str, session: str) -> Report | None:
        """The filing lease taken (the report as read), or None: filed, being filed, or under a live review
        claim of another than (claimant, session)."""
        return _report(await self.pool.fetchrow(CLAIM_FILING, fid, owner, lease_s, claimant, session))

    async def live_claim(self, fid: str) -> Claim | None:
        """The report's live review claim, or None."""
        return await live_claim(self.pool, fid)

    async def finish_filing(self, fid: str, owner: str, url: str,
                            audit: Callable[[Report], AuditEntry] | None = None) -> Report | None:
        """Store the ticket URL and FILED, with the audit record of `audit(filed)` in one transaction."""
        async with self.pool.acquire() as conn, conn.transaction():
            done = _report(await conn.fetchrow(FINISH_FILING, fid, owner, url, Status.FILED))
            if done is not None and audit is not None:
                await insert_audit(conn, [audit(done)])
            return done

    async def release_filing(self, fid: str, owner: str) -> None:
        await self.pool.execute(RELEASE_FILING, fid, owner)
