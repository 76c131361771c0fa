"""Every SQL constant of services/feedback/repository/ prepares against the migrated schema (real
PostgreSQL), so a typo or an ambiguous parameter type fails here, not in the middle of an RPC; and the
concurrency the repository promises (create vs delete, once-only span event) holds in PostgreSQL."""
from __future__ import annotations

import asyncio
import uuid

import asyncpg

from services.common.db import migrate
from services.feedback import domain as d
from services.feedback import repository
from services.feedback.repository import audit, capture, ratings, reports, statistics, text_search
from services.feedback.repository.capture import CaptureStore
from services.feedback.repository.reports import ReportStore
from services.feedback.model.enums import Author, Category, Sentiment, SnapshotSource, Surface, TraceState
from services.feedback.model.report import Anchor, DeletedCreate, NewReport, Snapshot, Stored
from services.feedback.server import MIGRATIONS


async def test_every_statement_prepares(database_url):
    await migrate(database_url, "feedback", MIGRATIONS)
    conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback,public"})
    try:
        statements = {f"{m.__name__}.{n}": getattr(m, n)
                      for m in (audit, capture, ratings, reports, statistics, text_search) for n in dir(m)
                      if n.isupper() and not n.startswith("_") and isinstance(getattr(m, n), str)
                      and getattr(m, n).lstrip().split(None, 1)[0].upper() in ("SELECT", "INSERT", "UPDATE",
                                                                               "DELETE", "WITH")}
        assert len(statements) >= 20
        for n, sql in statements.items():
            try:
                await conn.prepare(str(sql))  # NamedSQL: asyncpg wants an exact str
            except asyncpg.PostgresError as e:
                raise AssertionError(f"{n}: {e}") from None
    finally:
        await conn.close()


async def test_spans_frozen_into_an_unverified_client_row_before_the_fix_are_dropped_and_reverified(
        database_url, tmp_path):
    """A row captured by the old worker from a CLIENT snapshot (never verified) loses its frozen copy
    and goes back to the verification queue; a verified (chat service) row keeps its copy."""
    old = tmp_path / "migrations"
    old.mkdir()
    for f in sorted(MIGRATIONS.glob("*.sql"))[:2]:
        (old / f.name).write_text(f.read_text())
    await migrate(database_url, "feedback", old)
    conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback,public"})
    try:
        for fid, source in (("leaked", 2), ("verified", 1)):
            await conn.execute(
                """INSERT INTO feedback (id, owner, request_id, target_kind, message, author, body, snapshot,
                       snapshot_source, trace_id, trace_state, trace_snapshot, capture_time, create_time, update_time)
                   VALUES ($1, 'mallory', gen_random_uuid(), 'message', 'instances/a/messages/m', 1, 'words', '{}',
                       $2, $3, 2, '{"tool_calls": [{"name": "owner_secret_tool"}]}', now(), now(), now())""",
                fid, source, "ab" * 16)
        await migrate(database_url, "feedback", MIGRATIONS)
        rows = {r["id"]: r for r in await conn.fetch(
            "SELECT id, trace_state, trace_snapshot::text AS ts, refresh_at, body FROM feedback")}
        assert rows["leaked"]["trace_state"] == 1 and "owner_secret_tool" not in rows["leaked"]["ts"]
        assert rows["leaked"]["refresh_at"] is not None and rows["leaked"]["body"] == "words"
        assert rows["verified"]["trace_state"] == 2 and "owner_secret_tool" in rows["verified"]["ts"]
    finally:
        await conn.close()


def _client_row(request_id: uuid.UUID, source: int = 2) -> NewReport:
    src = SnapshotSource(source)
    plan = d.capture_plan(src, "ab" * 16)
    return NewReport(
        id=uuid.uuid4().hex, owner="alice", request_id=request_id, fingerprint=b"f" * 32,
        anchor=Anchor("message", message="instances/a/messages/m", instance="instances/a", trace_id="ab" * 16),
        surface=Surface.CHAT, author=Author.USER, body="words", sentiment=Sentiment.BAD, category=Category.UNSPECIFIED,
        snapshot=Snapshot(source=src), turn_time=None, trace_state=TraceState.PENDING, copy_sibling=plan.copy_sibling,
        capture_due=plan.capture_due, verify_due=plan.verify_due, authoritative=plan.authoritative,
    )


async def test_a_create_racing_the_delete_of_its_first_row_writes_nothing(database_url):
    """The delete commits while the retried INSERT waits on the row it deletes: PostgreSQL then lets
    the INSERT through (the conflicting row is gone), so the repository must notice the deletion
    record in the same transaction and roll the new row back — never a second row."""
    await migrate(database_url, "feedback", MIGRATIONS)
    pool = await repository.create_pool(database_url, 1, 4)
    conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback,public"})
    try:
        repo = ReportStore(pool)
        rid = uuid.uuid4()
        first = (await repo.insert_report(_client_row(rid, source=1), 86400)).report
        tx = conn.transaction()
        await tx.start()
        assert await conn.fetchval(reports.DELETE_FEEDBACK, first.id, "alice") == first.id
        retry = asyncio.ensure_future(repo.insert_report(_client_row(rid, source=1), 86400))
        await asyncio.sleep(0.3)
        assert not retry.done()  # waiting on the row the open delete holds
        await tx.commit()
        deleted = await retry
        assert isinstance(deleted, DeletedCreate) and deleted.feedback_id == first.id
        assert await conn.fetchval("SELECT count(*) FROM feedback") == 0
    finally:
        await conn.close()
        await pool.close()


async def test_a_client_rows_created_event_is_claimed_once_however_many_workers_verify_it(database_url):
    """`feedback.created` for a CLIENT row: the verifying UPDATE says `emit_created` exactly once, even
    when several workers (a lease that ran out, another replica) verify the same row at once; a
    chat-service row is marked at insert instead."""
    await migrate(database_url, "feedback", MIGRATIONS)
    pool = await repository.create_pool(database_url, 1, 4)
    try:
        repo, worker = ReportStore(pool), CaptureStore(pool)
        client = await repo.insert_report(_client_row(uuid.uuid4()), 86400)
        chat = await repo.insert_report(_client_row(uuid.uuid4(), source=1), 86400)
        assert not client.event_due and chat.event_due
        verified = Anchor("message", message="instances/a/messages/m", instance="instances/a", trace_id="cd" * 16)
        plan = d.capture_plan(SnapshotSource.CHAT_SERVICE, "cd" * 16)
        snap = Snapshot(source=SnapshotSource.CHAT_SERVICE, target_text="t")
        done = await asyncio.gather(*(worker.refresh_done(client.report.id, snap, plan.trace_state, plan.capture_due,
                                                        plan.authoritative, None, verified) for _ in range(4)))
        emitted = [e for e in done if e is not None]
        assert len(emitted) == 1 and emitted[0].trace_id == "cd" * 16 and emitted[0].sentiment == 2
        assert await worker.refresh_done(client.report.id, Snapshot(source=SnapshotSource.CHAT_SERVICE),
                                       plan.trace_state, plan.capture_due, plan.authoritative, None,
                                       Anchor("message", trace_id="cd" * 16)) is None
    finally:
        await pool.close()


async def test_reports_stored_before_the_ledger_claim_their_request_ids(database_url, tmp_path):
    """0005 backfills `feedback_create_requests` from the rows already stored: their request ids are
    claimed (a retry returns the row) and outlive a delete (a retry after it writes nothing)."""
    old = tmp_path / "migrations"
    old.mkdir()
    for f in sorted(MIGRATIONS.glob("*.sql"))[:4]:
        (old / f.name).write_text(f.read_text())
    await migrate(database_url, "feedback", old)
    pool = await repository.create_pool(database_url, 1, 2)
    try:
        rid = uuid.uuid4()
        row = _client_row(rid, source=1)
        async with pool.acquire() as conn:
            await conn.execute(
                """INSERT INTO feedback (id, owner, request_id, target_kind, author, body, snapshot, snapshot_source,
                       request_fingerprint, create_time, update_time)
                   VALUES ($1, 'alice', $2, 'message', 1, 'words', '{}', 1, $3, now(), now())""",
                row.id, rid, row.fingerprint)
        await migrate(database_url, "feedback", MIGRATIONS)
        repo = ReportStore(pool)
        again = _client_row(rid, source=1)
        stored = await repo.insert_report(again, 86400)
        assert isinstance(stored, Stored) and stored.report.id == row.id
        assert (await repo.delete_report(row.id, "alice", None, 86400))[0]
        deleted = await repo.insert_report(again, 86400)
        assert isinstance(deleted, DeletedCreate) and deleted.feedback_id == row.id
    finally:
        await pool.close()


async def test_the_capture_queues_generic_plans_read_their_partial_indexes(database_url):
    """Every capture worker of every replica polls these statements about once a second; asyncpg keeps
    them prepared and PostgreSQL may switch to their generic plan. That plan must still read the
    queue's partial index, not the whole table (sequential scans are priced off, so a plan that can
    use no index shows one)."""
    await migrate(database_url, "feedback", MIGRATIONS)
    conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback,public"})
    try:
        await conn.execute("SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan")
        for n, (sql, args, indexes) in enumerate((
                (capture.CLAIM_CAPTURE.text, "(16, 30)", {"feedback_capture_queue", "feedback_capture_recheck"}),
                (capture.CLAIM_REFRESH, "(16, 30)", {"feedback_snapshot_refresh"}),
                (capture.CAPTURE_BACKLOG, "", {"feedback_capture_queue"}))):
            await conn.execute(f"PREPARE q{n} AS {sql}")
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE q{n}{args}"))
            assert "Seq Scan on feedback" not in plan, plan
            assert all(i in plan for i in indexes), plan
    finally:
        await conn.close()
