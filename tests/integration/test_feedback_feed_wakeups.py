"""The change feed's LISTEN connection (services/feedback/feed_wakeups.py) opens like every other
database connection (services.common.db.connect): with a multi-host URL whose first host hangs, each
host gets its own connect timeout, so the listener comes up on the host that answers. Its NOTIFYs: one
after a lone write at once, at most one per NOTIFY_GAP_S while writes keep coming, and always one after
the last; a subscription announced on one replica wakes another replica's webhook worker, a write does
not. A NOTIFY waits for no WAL flush (an INSERT does)."""
from __future__ import annotations

import asyncio
import contextlib
import time
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest

from services.common import db
from services.feedback.feed_wakeups import CONNECT_TIMEOUT_S, NOTIFY, NOTIFY_GAP_S, FeedWakeups


async def _hung_host() -> tuple[asyncio.Server, list[asyncio.StreamWriter]]:
    """A TCP port that accepts and never answers (a frozen or cut-off database host)."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)

    return await asyncio.start_server(accept, "127.0.0.1", 0), held


async def _tcp_to_socket(socket_dir: str, port: int) -> asyncio.Server:
    """A TCP front for the embedded cluster's Unix socket (it listens on no TCP port)."""
    path = f"{socket_dir}/.s.PGSQL.{port}"

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        w.close()

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_unix_connection(path)
        await asyncio.gather(pipe(r, uw), pipe(ur, w))

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_the_change_feed_listens_when_the_first_database_host_hangs(database_url):
    parts = urlsplit(database_url)
    q = parse_qs(parts.query)
    if "host" not in q:
        pytest.skip("needs the embedded cluster's socket URL")  # AGENTFEEDBACK_TEST_DATABASE_URL set to TCP
    hung, held = await _hung_host()
    front = await _tcp_to_socket(q["host"][0], int(q.get("port", ["5432"])[0]))
    hung_port = hung.sockets[0].getsockname()[1]
    front_port = front.sockets[0].getsockname()[1]
    url = f"postgresql://{parts.username}@127.0.0.1:{hung_port},127.0.0.1:{front_port}{parts.path}"
    db._host_order.pop(url, None)
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    wakeups = FeedWakeups(url, pool)
    t0 = time.monotonic()
    try:
        await wakeups.start()
        deadline = t0 + 4 * CONNECT_TIMEOUT_S
        while not wakeups.listening and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert wakeups.listening, "the LISTEN connection never came up past the hung first host"
        assert held, "the hung host was tried first"
    finally:
        await wakeups.stop()
        await pool.close()
        for w in held:
            w.close()
        for s in (hung, front):
            s.close()


async def _listening(database_url: str, n: int) -> tuple[asyncpg.Pool, list[FeedWakeups]]:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    replicas = [FeedWakeups(database_url, pool) for _ in range(n)]
    for w in replicas:
        await w.start()
        assert w.listening
    return pool, replicas


async def test_a_lone_write_is_announced_at_once_and_a_stream_of_writes_once_per_gap(database_url):
    pool, (writer, reader) = await _listening(database_url, 2)
    try:
        woken = reader.changed()
        t0 = time.monotonic()
        writer.poke()
        await asyncio.wait_for(woken.wait(), 2)
        assert time.monotonic() - t0 < 0.5  # no wait before the first NOTIFY (loaded machine: a margin)
        await asyncio.sleep(NOTIFY_GAP_S * 2)
        g0, t0 = reader.generation, time.monotonic()
        while True:  # a write every ms for 0.3 s
            writer.poke()
            if time.monotonic() - t0 >= 0.3:
                break
            await asyncio.sleep(0.001)
        # Taken before the last write's NOTIFY can be sent (no await since its poke): on a loaded machine
        # the NOTIFY could otherwise arrive during the loop's last sleep, before the test waits for it.
        last = reader.changed()
        await asyncio.wait_for(last.wait(), 2)  # the NOTIFY after the last write arrives
        n = reader.generation - g0
        assert 2 <= n <= 0.3 / NOTIFY_GAP_S + 3, n
    finally:
        for w in (writer, reader):
            await w.stop()
        await pool.close()


async def test_a_subscription_announced_on_one_replica_wakes_the_other_replicas_webhook_worker(database_url):
    pool, (one, other) = await _listening(database_url, 2)
    try:
        subscribed = other.subscriptions_changed()
        feed = other.changed()
        one.poke()  # a write: streams wake, the webhook worker's subscriptions event does not
        await asyncio.wait_for(feed.wait(), 2)
        await asyncio.sleep(0.1)
        assert not subscribed.is_set()
        await one.announce_subscriptions()
        await asyncio.wait_for(subscribed.wait(), 2)
    finally:
        for w in (one, other):
            await w.stop()
        await pool.close()


async def test_a_notify_waits_for_no_wal_flush_and_an_insert_does(database_url):
    """Why NOTIFY keeps the cluster's synchronous_commit: a transaction that wrote no WAL before its commit
    record commits without a flush anyway, so a NOTIFY after a create adds no disk flush (issue 29)."""
    conn = await asyncpg.connect(database_url)
    try:
        if await conn.fetchval("SELECT to_regproc('pg_stat_get_backend_io') IS NULL"):
            pytest.skip("per-backend I/O statistics need PostgreSQL 18")

        async def flushes() -> int:
            await conn.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, published now
            # Writes and fsyncs: with wal_sync_method open_datasync (the embedded cluster's) a flush is an
            # O_DSYNC write and no fsync; a commit that does not wait leaves both to the WAL writer.
            return await conn.fetchval(
                "SELECT coalesce(sum(writes), 0) + coalesce(sum(fsyncs), 0) "
                "FROM pg_stat_get_backend_io(pg_backend_pid()) WHERE object = 'wal'")

        await conn.execute("CREATE TABLE IF NOT EXISTS public.notify_flush_probe (n int)")
        f0 = await flushes()
        for _ in range(20):
            await conn.execute(NOTIFY)
        f1 = await flushes()
        for _ in range(3):
            await conn.execute("INSERT INTO public.notify_flush_probe VALUES (1)")
        f2 = await flushes()
        assert f1 - f0 == 0, f"{f1 - f0} WAL writes/flushes for 20 NOTIFYs"
        assert f2 - f1 >= 3, f"{f2 - f1} WAL writes/flushes for 3 committed INSERTs"  # the counter counts
    finally:
        await conn.execute("DROP TABLE IF EXISTS public.notify_flush_probe")
        await conn.close()


async def test_a_write_is_announced_on_the_listening_connection_while_the_pool_is_busy(database_url):
    # The NOTIFY goes on the listening connection (issue 29: no pool acquire and release per NOTIFY):
    # every pool connection held by writes, the announcement still reaches the other replica at once.
    pool, (writer, reader) = await _listening(database_url, 2)
    held = [await pool.acquire() for _ in range(pool.get_max_size())]
    try:
        woken = reader.changed()
        writer.poke()
        await asyncio.wait_for(woken.wait(), 2)
    finally:
        for conn in held:
            await pool.release(conn)
        for w in (writer, reader):
            await w.stop()
        await pool.close()


async def test_a_write_is_announced_on_the_pool_while_the_listening_connection_is_lost(database_url):
    pool, (writer, reader) = await _listening(database_url, 2)
    try:
        writer._conn.terminate()  # noqa: SLF001 - the listening connection drops (a failover, a cut)
        woken = reader.changed()
        writer.poke()
        await asyncio.wait_for(woken.wait(), 2)
    finally:
        for w in (writer, reader):
            await w.stop()
        await pool.close()


async def _front_holding_eof(socket_dir: str, port: int) -> tuple[asyncio.Server, list[asyncio.StreamWriter]]:
    """A TCP front for the cluster's socket that passes the server's bytes on but not its close: the
    client reads a backend's FATAL and its connection stays open (what a client sees for a moment when
    the server ends it: asyncpg's protocol then waits for a ReadyForQuery that never comes)."""
    path = f"{socket_dir}/.s.PGSQL.{port}"
    held: list[asyncio.StreamWriter] = []

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await r.read(65536):
                w.write(data)
                await w.drain()

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)
        ur, uw = await asyncio.open_unix_connection(path)
        await asyncio.gather(pipe(r, uw), pipe(ur, w))

    return await asyncio.start_server(serve, "127.0.0.1", 0), held


async def test_a_write_is_announced_on_the_pool_when_the_server_ends_the_listening_connection(database_url):
    """A PostgreSQL restart: the listening connection has read its backend's FATAL but not yet its close,
    and a NOTIFY on it raises asyncpg's InternalClientError ("cannot switch to state 15; another
    operation (2) is in progress"). It is sent on the pool instead, as for any lost connection; it used
    to escape `_notify` (an ERROR "Task exception was never retrieved", the announcement lost)."""
    parts = urlsplit(database_url)
    q = parse_qs(parts.query)
    if "host" not in q:
        pytest.skip("needs the embedded cluster's socket URL")
    front, held = await _front_holding_eof(q["host"][0], int(q.get("port", ["5432"])[0]))
    url = f"postgresql://{parts.username}@127.0.0.1:{front.sockets[0].getsockname()[1]}{parts.path}"
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    writer, reader = FeedWakeups(url, pool), FeedWakeups(database_url, pool)
    try:
        for w in (writer, reader):
            await w.start()
            assert w.listening
        pid = writer._conn.get_server_pid()  # noqa: SLF001 - the listening connection's backend
        assert await pool.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
        await asyncio.sleep(0.2)  # its FATAL read by the client; the close held by the front
        assert writer.listening and not writer._conn.is_closed()  # noqa: SLF001
        woken = reader.changed()
        writer.poke()
        poker = writer._poker  # noqa: SLF001
        await asyncio.wait({poker}, timeout=2)
        assert poker.done() and poker.exception() is None, poker
        await asyncio.wait_for(woken.wait(), 2)  # the other replica was told
    finally:
        for w in (writer, reader):
            await w.stop()
        await pool.close()
        for w in held:
            w.close()
        front.close()
