"""Shutdown never waits for ever on the database pool (a stuck task holding a connection)."""
from __future__ import annotations

import asyncio
import time

import asyncpg

from services.common.db import close_pool, create_pool


async def test_a_connection_never_released_does_not_hang_shutdown(database_url: str):
    """asyncpg's Pool.close() waits until every connection is released; a task that holds one for ever
    (a stuck handler, a leaked acquire) would keep the process, or a test's teardown, hanging. close_pool
    gives up after its timeout and the held connection is terminated."""
    pool = await create_pool(database_url, "public", min_size=1, max_size=2)
    held = await pool.acquire()
    started = time.monotonic()
    await asyncio.wait_for(close_pool(pool, timeout_s=0.5), 10)
    assert time.monotonic() - started < 3
    assert held is not None
    conn = await asyncpg.connect(database_url)
    try:  # the held connection's backend is gone too (terminated, not left open on the server)
        for _ in range(50):
            left = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                       " AND application_name = 'agentfeedback-public'")
            if left == 0:
                break
            await asyncio.sleep(0.05)
        assert left == 0
    finally:
        await conn.close()


async def test_an_idle_pool_closes_at_once(database_url: str):
    pool = await create_pool(database_url, "public", min_size=2, max_size=2)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT 1") == 1
    started = time.monotonic()
    await close_pool(pool, timeout_s=5)
    assert time.monotonic() - started < 1


async def test_stopping_the_stack_closes_every_service_pool_without_a_failed_step(
        database_url: str, tmp_path, caplog):
    """An SRE stopping a replica sees no ERROR and leaves no connection behind on PostgreSQL: every
    service's shutdown steps (close channels, close the pool, flush metrics) run and succeed."""
    from tests.stack import start_stack

    stack = await start_stack(database_url, tmp_path)
    await stack.stop()
    assert not [r for r in caplog.records if r.levelname == "ERROR"], [r.getMessage() for r in caplog.records]
    conn = await asyncpg.connect(database_url)
    try:
        left = await conn.fetch("SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
                                " AND application_name LIKE 'agentfeedback-%'")
        assert [r["application_name"] for r in left] == []
    finally:
        await conn.close()


async def test_a_feedback_replica_stops_without_a_failed_backlog_read(database_url: str, tmp_path, caplog,
                                                                      monkeypatch):
    """The capture-backlog gauge's loop stops before the pool closes: a read in flight at shutdown
    would otherwise fail on the closing pool and log a WARNING an SRE would chase. The loop is made
    to read back to back here so that a read is always in flight when the replica stops."""
    from services.feedback import metrics as feedback_metrics
    from tests.stack import start_stack

    monkeypatch.setattr(feedback_metrics.FeedbackMetrics.__init__, "__defaults__", (0.0,))
    stack = await start_stack(database_url, tmp_path)
    await asyncio.sleep(0.3)
    await stack.stop()
    noisy = [r.getMessage() for r in caplog.records if "capture backlog" in r.getMessage()]
    assert noisy == []
