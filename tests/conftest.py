"""Shared fixtures: a real embedded PostgreSQL for the whole test session, a fresh database per test,
and the whole stack (collector, chat gateway, reference agent, feedback) on loopback, each bound to port 0.

Nothing here skips: no PostgreSQL means the session fails.
"""
from __future__ import annotations

import asyncio
import io
import itertools
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import asyncpg
import pytest

from services.common.db import start_embedded_postgres
from services.tracecollector.clickhouse_transport import ChdbTransport
from tests.stack import Stack, no_default_metrics_ports, start_stack

_counter = itertools.count()

# No Prometheus endpoint unless a test gives one a port (tests.stack does: port 0, read back).
no_default_metrics_ports()


@pytest.fixture(scope="session")
def pg_url() -> str:
    """URL of the test cluster: `AGENTFEEDBACK_TEST_DATABASE_URL` if set, else an embedded one in a temp dir."""
    url = os.environ.get("AGENTFEEDBACK_TEST_DATABASE_URL")
    if url:
        return url
    base = Path(tempfile.mkdtemp(prefix="af-test-pg-"))
    return start_embedded_postgres(base / "pg", cleanup_mode="delete")


def _with_db(url: str, db: str) -> str:
    # Embedded URLs look like postgresql://postgres@/postgres?host=/socket/dir
    head, sep, query = url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{db}{sep}{query}"


@pytest.fixture(autouse=True)
async def fail_on_unhandled_loop_exceptions():
    """Fails the test when its event loop reports an exception nobody handled — a callback that raised,
    a task whose error was never retrieved (`loop.call_exception_handler`): otherwise such a failure is
    only a log line and the test passes. Covers the test's fixtures' teardown too (this one is set up
    first and torn down last). The loop's own handler still runs (the log line stays)."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    seen: list[dict] = []

    def handler(lp: asyncio.AbstractEventLoop, context: dict) -> None:
        seen.append(context)
        if previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield
    finally:
        loop.set_exception_handler(previous)
    if seen:
        lines = [f"- {c.get('message', '')}: {c.get('exception')!r}" for c in seen]
        pytest.fail("unhandled exception(s) in the event loop:\n" + "\n".join(lines), pytrace=False)


@pytest.fixture
async def database_url(pg_url: str):
    """A new, empty database for this test (dropped afterwards)."""
    name = f"t_{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:6]}"
    conn = await asyncpg.connect(pg_url)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    yield _with_db(pg_url, name)
    conn = await asyncpg.connect(pg_url)
    await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await conn.close()


# The collector's span stores. A module runs on both with
#   pytestmark = pytest.mark.parametrize("span_store", SPAN_STORES, indirect=True)
SPAN_STORES = ("postgresql", "clickhouse")


@pytest.fixture
def span_store(request) -> str:
    """The collector's span store for this test: `postgresql` unless the module parametrizes it."""
    return getattr(request, "param", "postgresql")


@pytest.fixture(scope="session")
def chdb_path():
    """Data directory of the session's in-process ClickHouse engine (chdb: one per process), closed
    at the session's end."""
    path = tempfile.mkdtemp(prefix="af-test-chdb-")
    yield path
    ChdbTransport.shutdown_all()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def collector_store(span_store: str, chdb_path: str):
    """(CollectorSettings overrides, create_server keyword arguments) for this test's span store:
    nothing for PostgreSQL (the test's database); for ClickHouse a database of its own in the
    session's chdb engine (the test stand-in for a ClickHouse server), dropped afterwards."""
    if span_store == "postgresql":
        yield {}, {}
        return
    name = f"t_{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:6]}"
    transport = ChdbTransport.shared(chdb_path)
    yield {"span_store": "clickhouse", "clickhouse_database": name}, {"span_transport": transport}
    await transport.command(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
async def stack(database_url: str, tmp_path: Path, collector_store):
    """The whole stack in this process on ports it bound (port 0), one database (and the span store
    of `span_store`); stopped after the test."""
    settings, kw = collector_store
    s = await start_stack(database_url, tmp_path, collector_kw=kw, collector=settings)
    try:
        yield s
    finally:
        await _stop_or_show_what_hangs(s)


# The smallest GetTrace answer budget the collector takes (CollectorSettings.get_trace_budget_bytes).
CUT_TRACE_BUDGET_BYTES = 64 * 1024


@pytest.fixture
async def cut_stack(database_url: str, tmp_path: Path, collector_store):
    """`stack`, with a collector that answers GetTrace within CUT_TRACE_BUDGET_BYTES (so a trace with a
    few large values comes back cut and says so)."""
    settings, kw = collector_store
    s = await start_stack(database_url, tmp_path, collector_kw=kw,
                          collector={**settings, "get_trace_budget_bytes": CUT_TRACE_BUDGET_BYTES})
    try:
        yield s
    finally:
        await _stop_or_show_what_hangs(s)


# A stack stops in about a second; past this a teardown has hung, and the asyncio tasks' stacks (which
# pytest-timeout's thread dump does not show) name what it waits for.
STACK_STOP_LIMIT_S = 60.0


async def _stop_or_show_what_hangs(s: Stack) -> None:
    task = asyncio.ensure_future(s.stop())
    done, _ = await asyncio.wait({task}, timeout=STACK_STOP_LIMIT_S)
    if task in done:
        task.result()
        return
    buf = io.StringIO()
    for t in asyncio.all_tasks():
        t.print_stack(file=buf)
    task.cancel()
    pytest.fail(f"the stack did not stop within {STACK_STOP_LIMIT_S:.0f} s; asyncio tasks:\n{buf.getvalue()}")


__all__ = ["SPAN_STORES", "Stack"]
