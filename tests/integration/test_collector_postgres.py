"""Collector behaviour that is PostgreSQL's own (locks, partition DDL): the PostgreSQL span store only."""
from __future__ import annotations

import asyncio
import time

import asyncpg
import grpc
import pytest

from tests.helpers.otlp import NS, one_trace, request

DAY = 86_400 * NS


async def test_a_retention_pass_blocked_by_a_reader_does_not_stall_exports(start_collector):
    now = time.time_ns()
    c = await start_collector(clock=lambda: now)
    stub = c.otlp()
    old_tid, old = one_trace(50, start_ns=now - 13 * DAY)
    await stub.Export(request(old))
    reader = await asyncpg.connect(c.database_url)
    try:
        # A long read of the day about to be dropped: the drop has to wait for it...
        tx = reader.transaction()
        await tx.start()
        assert await reader.fetchval("SELECT count(*) FROM traces.spans WHERE trace_id = $1", old_tid) == 50
        drop = asyncio.create_task(c.server.retention.run_once(now_ns=now + 2 * DAY))
        await asyncio.sleep(0.3)
        assert not drop.done()
        # ...but ingest goes on meanwhile (a plain DETACH would queue an exclusive lock on `spans`
        # in front of every COPY until the reader ends).
        for _ in range(3):
            tid, spans = one_trace(5)
            await asyncio.wait_for(stub.Export(request(spans)), 1.0)
            assert len((await c.get_trace(tid)).spans) == 5
        assert not drop.done()
        await tx.commit()
    finally:
        await reader.close()
    result = await drop
    assert len(result.dropped) >= 1
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await c.get_trace(old_tid)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
