"""The change feed's LISTEN connection (services/feedback/feed_wakeups.py) opens like every other
database connection (services.common.db.connect): with a multi-host URL whose first host hangs, each
host gets its own connect timeout, so the listener comes up on the host that answers."""
from __future__ import annotations

import asyncio
import contextlib
import time
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest

from services.common import db
from services.feedback.feed_wakeups import CONNECT_TIMEOUT_S, FeedWakeups


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
