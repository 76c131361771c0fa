"""The quoted replies' side index (migration 0095, services/feedback/quote_index.py) never changes what a
search answers: ListFeedback's text search over the reports' quoted texts pages exactly as one query over
the reports' own text, while the quotes are pending, once the indexer has moved them, after quotes
changed (a refreshed snapshot) and reports were deleted, and after a real PostgreSQL crash emptied the
unlogged side table, before and after the indexer rebuilt it. Every page goes through the index step
(text_search step 3), where the side table is read. The create's INSERT no longer writes the quote's
trigrams: a report's quote is indexed by the indexer, and a deleted report's text leaves the side table."""
from __future__ import annotations

import asyncio
import json
import signal
import tempfile
from pathlib import Path

import asyncpg
import pytest

from services.common.db import embedded_postgres_server, migrate
from services.feedback.model.report import ReportFilter
from services.feedback.quote_index import QuoteIndexer
from services.feedback.repository import create_pool, text_search
from services.feedback.repository.quotes import QuoteStore
from services.feedback.repository.reports import ReportStore
from services.feedback.server import MIGRATIONS
from tests.helpers.procs import start_postgres_again, stop_postgres_fast
from tests.helpers.report_search import LIST_TRUTH
from tests.helpers.report_search import chunks as _chunks
from tests.helpers.report_search import pages as _pages
from tests.helpers.report_search import seed_reports as _seed

# "reply" is only ever in quoted texts (_seed's bodies never hold it), "needle" in both, "zircon" only in
# the quotes this test writes later.
WORDS = ("reply", "needle", "zircon")
SIDE = "SELECT id, quote FROM feedback.feedback_quotes ORDER BY id"
QUOTED = """SELECT id, snapshot->>'target_text' AS quote FROM feedback.feedback
WHERE coalesce(snapshot->>'target_text', '') <> '' ORDER BY id"""


@pytest.fixture
def every_page_through_the_index(monkeypatch):
    monkeypatch.setattr(text_search, "NEWEST_PAGES", 0)  # step 1 answers nothing: step 3 finds every page
    monkeypatch.setattr(text_search, "MATCH_CAP", 1000)  # and never hands over to step 4's walk


async def _assert_searches_exact(reports: ReportStore, truth: asyncpg.Connection, label: str) -> None:
    for word in WORDS:
        for owner in ("o0", "o1"):
            want = [r["id"] for r in await truth.fetch(LIST_TRUTH, owner, None, None, word)]
            for size in (1, 7, 50):
                async def fetch(after, n, owner=owner, word=word):
                    got = await reports.list_reports(owner, ReportFilter(text=word), after, n)
                    return [(r.create_time, r.id) for r in got]
                assert await _pages(fetch, size) == _chunks(want, size), (label, word, owner, size)


async def _index_all(indexer: QuoteIndexer) -> None:
    while await indexer.run_once():
        pass


async def _pending(truth: asyncpg.Connection) -> int:
    return await truth.fetchval("SELECT count(*) FROM feedback.feedback_quotes_pending")


async def test_searches_stay_exact_while_quotes_are_pending_indexed_changed_and_deleted(
        database_url, every_page_through_the_index):
    await migrate(database_url, "feedback", MIGRATIONS)
    await _seed(database_url)  # 240 reports by plain INSERTs, as any writer makes them
    pool = await create_pool(database_url, 1, 2)
    truth = await asyncpg.connect(database_url)
    try:
        reports, indexer = ReportStore(pool), QuoteIndexer(QuoteStore(pool))
        quoted = await truth.fetch(QUOTED)
        assert len(quoted) > 100
        # The inserts wrote no quote into the side index: each left a pending row for the indexer.
        assert await truth.fetch(SIDE) == [] and await _pending(truth) == len(quoted)
        await _assert_searches_exact(reports, truth, "pending")

        await _index_all(indexer)
        assert await _pending(truth) == 0
        assert [tuple(r) for r in await truth.fetch(SIDE)] == [tuple(r) for r in quoted]
        await _assert_searches_exact(reports, truth, "indexed")

        # A refreshed snapshot (the capture worker's UPDATE of `snapshot`): the old text leaves the side
        # table at once, the new one is pending; a change elsewhere in the snapshot leaves the quote alone.
        await truth.execute("""UPDATE feedback.feedback SET snapshot = snapshot || '{"target_text": "a zircon reply"}'
                               WHERE id IN ('f000', 'f001', 'f002', 'f003')""")
        await truth.execute("""UPDATE feedback.feedback SET snapshot = snapshot || '{"target_text": "plain"}'
                               WHERE snapshot->>'target_text' LIKE '%needle%' AND id < 'f100'""")
        await truth.execute("""UPDATE feedback.feedback SET snapshot = snapshot || '{"mark": 1}' WHERE id >= 'f100'""")
        changed = await truth.fetchval("""SELECT count(*) FROM feedback.feedback f
            WHERE NOT EXISTS (SELECT FROM feedback.feedback_quotes q WHERE q.id = f.id)
              AND coalesce(f.snapshot->>'target_text', '') <> ''""")
        assert changed >= 4 and await _pending(truth) == changed
        assert not await truth.fetchval("SELECT count(*) FROM feedback.feedback_quotes WHERE quote LIKE '%needle%' "
                                        "AND id < 'f100'")
        await _assert_searches_exact(reports, truth, "changed, pending")
        await _index_all(indexer)
        await _assert_searches_exact(reports, truth, "changed, indexed")

        # A deleted report's quote goes with it (no text of it stays searchable or stored).
        gone = [r["id"] for r in await truth.fetch("SELECT id FROM feedback.feedback WHERE snapshot->>'target_text' "
                                                   "LIKE '%reply%' ORDER BY id LIMIT 5")]
        for rid in gone:  # as DeleteFeedback deletes
            owner = await truth.fetchval("SELECT owner FROM feedback.feedback WHERE id = $1", rid)
            assert (await reports.delete_report(rid, owner, None, 86400.0))[0]
        assert not await truth.fetchval("SELECT count(*) FROM feedback.feedback WHERE id = ANY($1::text[])", gone)
        assert not await truth.fetchval("SELECT count(*) FROM feedback.feedback_quotes WHERE id = ANY($1::text[])", gone)
        assert [tuple(r) for r in await truth.fetch(SIDE)] == [tuple(r) for r in await truth.fetch(QUOTED)]
        await _assert_searches_exact(reports, truth, "deleted")
    finally:
        await truth.close()
        await pool.close()


async def test_a_report_deleted_while_its_quote_is_indexed_leaves_nothing_and_the_pass_succeeds(database_url):
    await migrate(database_url, "feedback", MIGRATIONS)
    await _seed(database_url)
    pool = await create_pool(database_url, 1, 2)
    deleter = await asyncpg.connect(database_url)
    try:
        rid = await deleter.fetchval("""SELECT f.id FROM feedback.feedback f JOIN feedback.feedback_quotes_pending p
                                        USING (id) ORDER BY f.id LIMIT 1""")
        tx = deleter.transaction()
        await tx.start()
        await deleter.execute("SELECT 1 FROM feedback.feedback WHERE id = $1 FOR UPDATE", rid)  # as DELETE locks it
        indexing = asyncio.ensure_future(QuoteIndexer(QuoteStore(pool)).run_once())
        await asyncio.sleep(0.5)  # the pass waits on the report's lock (its side row's foreign key check)
        assert not indexing.done()
        await deleter.execute("DELETE FROM feedback.feedback WHERE id = $1", rid)
        await tx.commit()
        assert await asyncio.wait_for(indexing, 10) > 0  # run again after the foreign key check failed
        assert not await deleter.fetchval("SELECT count(*) FROM feedback.feedback_quotes WHERE id = $1", rid)
        assert not await deleter.fetchval("SELECT count(*) FROM feedback.feedback_quotes_pending WHERE id = $1", rid)
    finally:
        await deleter.close()
        await pool.close()


async def test_after_a_postgresql_crash_searches_stay_exact_and_the_side_index_is_rebuilt(
        every_page_through_the_index):
    # Its own cluster (as tests/ops/test_database_outage.py): crashing it leaves every other test's alone.
    pgdata = Path(tempfile.mkdtemp(prefix="af-quotes-pg-")) / "pg"
    pg = embedded_postgres_server(pgdata, cleanup_mode="delete")
    url = pg.get_uri("postgres")
    await migrate(url, "feedback", MIGRATIONS)
    await _seed(url)
    pool = await create_pool(url, 1, 2)
    indexer = QuoteIndexer(QuoteStore(pool))
    await _index_all(indexer)
    await pool.close()
    await _write_pending(url, "f005", "a zircon reply written just before the crash")

    # An immediate shutdown (SIGQUIT to the postmaster): no checkpoint, crash recovery at the next start,
    # which resets every unlogged table to empty. The logged pending rows survive.
    await stop_postgres_fast(pgdata, signal.SIGQUIT)
    await start_postgres_again(pgdata)

    pool = await create_pool(url, 1, 2)
    truth = await asyncpg.connect(url)
    try:
        assert await truth.fetch(SIDE) == []
        assert not await truth.fetchval("SELECT EXISTS (SELECT FROM feedback.feedback_quotes_built)")
        assert await _pending(truth) == 1
        reports, indexer = ReportStore(pool), QuoteIndexer(QuoteStore(pool))
        await _assert_searches_exact(reports, truth, "crashed, not rebuilt")

        await indexer.run_once()  # sees the side table unbuilt: rebuilds it, then marks it built
        assert await truth.fetchval("SELECT EXISTS (SELECT FROM feedback.feedback_quotes_built)")
        assert await _pending(truth) == 0
        assert [tuple(r) for r in await truth.fetch(SIDE)] == [tuple(r) for r in await truth.fetch(QUOTED)]
        await _assert_searches_exact(reports, truth, "rebuilt")
    finally:
        await truth.close()
        await pool.close()


async def _write_pending(url: str, rid: str, quote: str) -> None:
    """Change report `rid`'s quote (its snapshot's target_text) and commit: pending until indexed."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("UPDATE feedback.feedback SET snapshot = snapshot || $2::jsonb WHERE id = $1",
                           rid, json.dumps({"target_text": quote}))
    finally:
        await conn.close()
