"""How the ClickHouse span store reaches ClickHouse: one small interface, two implementations.

`HttpTransport` (production): a ClickHouse server over HTTP(S) with `clickhouse-connect`, the
ClickHouse-maintained client. `ChdbTransport`: the TEST STAND-IN for `HttpTransport` — the same
ClickHouse engine in-process (`chdb`, a dev dependency), because no ClickHouse server package can be
installed here. Both take the same SQL text, the same `{name:Type}` query parameters (ClickHouse's
server-side binding) and the same insert payload (any ClickHouse input format: the store sends
ArrowStream), so the store's SQL is tested as written.

Rows come back as tuples in SELECT order with Python values (String → str, (U)Int* → int, Map → dict,
Array → list). Queries must return only those types (times as `toUnixTimestamp64Nano(...)`).
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import orjson


class ClickHouseError(Exception):
    """A statement failed (the server's message in `args[0]`)."""


class ClickHouseTransport(Protocol):
    # Statements run one at a time: more concurrent INSERTs would only wait, in smaller parts.
    serial: bool

    async def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        """Run a statement that returns nothing (DDL, ALTER, INSERT ... SELECT)."""

    async def query(self, sql: str, params: Mapping[str, Any] | None = None,
                    settings: Mapping[str, int] | None = None) -> list[tuple]:
        """Run a SELECT (without a SETTINGS clause of its own) with the query `settings` (name → integer
        value, e.g. {"max_threads": 1}); its rows as tuples."""

    async def insert(self, table: str, columns: Sequence[str], payload: bytes, fmt: str,
                     settings: Mapping[str, int] | None = None) -> None:
        """INSERT the `fmt` payload (a ClickHouse input format: ArrowStream, JSONEachRow, ...) of
        `columns` into `table` (`db.name`) with the query `settings`; one INSERT statement: ClickHouse
        writes it as one part, atomically per block, and this returns once the server stored it."""

    async def ping(self) -> None:
        """Returns when ClickHouse answers; raises ClickHouseError otherwise."""

    async def close(self) -> None: ...


# --- parameter text (the form ClickHouse's HTTP interface takes for `param_<name>`) -------------


def _quoted(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return param_text(v)


def param_text(v: Any) -> str:
    """The text form of a query parameter value: a string as is (escaped as TSV), a number, an array
    `['a','b']`."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_quoted(x) for x in v) + "]"
    raise TypeError(f"unsupported parameter type {type(v).__name__}")


def _settings_text(settings: Mapping[str, int]) -> str:
    """`name = value, ...` for a SETTINGS clause. Raises ValueError on a name that is not an identifier
    (it is pasted into the statement)."""
    for k in settings:
        if not k.isidentifier():
            raise ValueError(f"not a ClickHouse setting name: {k!r}")
    return ", ".join(f"{k} = {int(v)}" for k, v in settings.items())


class HttpTransport:
    """A ClickHouse server over HTTP(S) (`clickhouse-connect`'s async client). `url`:
    `http[s]://user[:password]@host:port` (port 8123 / 8443 by default); `password` wins over the URL's."""

    serial = False

    def __init__(self, url: str, *, password: str = "", connect_timeout_s: float = 5.0,
                 send_receive_timeout_s: float = 30.0):
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("clickhouse_url must be http[s]://[user[:password]@]host[:port]")
        self._kw = dict(
            host=u.hostname, port=u.port or (8443 if u.scheme == "https" else 8123), secure=u.scheme == "https",
            username=unquote(u.username or "default"), password=password or unquote(u.password or ""),
            connect_timeout=connect_timeout_s, send_receive_timeout=send_receive_timeout_s,
        )
        self._client = None

    async def _get(self):
        if self._client is None:
            import clickhouse_connect  # noqa: PLC0415 (only the ClickHouse store needs it)

            self._client = await clickhouse_connect.get_async_client(**self._kw)
        return self._client

    async def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        try:
            await (await self._get()).command(sql, parameters=dict(params or {}))
        except Exception as e:  # clickhouse_connect.driver.exceptions.DatabaseError and transport errors
            raise ClickHouseError(str(e)) from e

    async def query(self, sql: str, params: Mapping[str, Any] | None = None,
                    settings: Mapping[str, int] | None = None) -> list[tuple]:
        try:
            result = await (await self._get()).query(sql, parameters=dict(params or {}), settings=dict(settings or {}))
        except Exception as e:
            raise ClickHouseError(str(e)) from e
        return [tuple(r) for r in result.result_rows]

    async def insert(self, table: str, columns: Sequence[str], payload: bytes, fmt: str,
                     settings: Mapping[str, int] | None = None) -> None:
        try:
            await (await self._get()).raw_insert(table, column_names=list(columns), insert_block=payload, fmt=fmt,
                                                 settings=dict(settings or {}))
        except Exception as e:
            raise ClickHouseError(str(e)) from e

    async def ping(self) -> None:
        await self.query("SELECT 1")  # the server answers it beside running statements

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


class ChdbTransport:
    """TEST STAND-IN for `HttpTransport`: the ClickHouse engine in this process (`chdb`), data under
    `path`. chdb allows one engine (one path) per process, so every store of a test session shares
    one `ChdbTransport.shared(path)` and keeps apart by database. Statements run one at a time in a
    worker thread (the engine call blocks)."""

    serial = True
    _instances: dict[str, ChdbTransport] = {}
    # A statement holding the engine longer than this (HttpTransport's default send/receive timeout,
    # where a server's answer would have failed) no longer counts as the engine answering a ping.
    STALLED_S = 30.0

    def __init__(self, path: str):
        from chdb import session  # noqa: PLC0415 (dev dependency: tests and benches only)

        self._session = session.Session(path)
        self._lock = threading.Lock()
        self._busy_since: float | None = None  # time.monotonic() when the running statement took the engine
        # The ping's own thread: on asyncio's default executor it would queue behind statements
        # waiting there for the engine (6 workers on 2 cores), past the health check's 1 s timeout.
        self._ping_thread = ThreadPoolExecutor(1, thread_name_prefix="chdb-ping")

    @classmethod
    def shared(cls, path: str) -> ChdbTransport:
        if path not in cls._instances:
            cls._instances[path] = cls(path)
        return cls._instances[path]

    def raw(self, sql: str, fmt: str, params: Mapping[str, str]) -> bytes:
        """Run `sql` with `params` already in text form (as an HTTP request carries them); the result in
        `fmt`. Blocking. Raises ClickHouseError."""
        with self._engine():
            try:
                return self._session.query(sql, fmt, params=dict(params)).bytes()
            except Exception as e:  # chdb raises its ChdbError / RuntimeError with the engine's message
                raise ClickHouseError(str(e)) from e

    @contextmanager
    def _engine(self) -> Iterator[None]:
        with self._lock:
            self._busy_since = time.monotonic()
            try:
                yield
            finally:
                self._busy_since = None

    def _run(self, sql: str, params: Mapping[str, Any] | None, fmt: str) -> bytes:
        return self.raw(sql, fmt, {k: param_text(v) for k, v in (params or {}).items()})

    async def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        await asyncio.to_thread(self._run, sql, params, "CSV")

    async def query(self, sql: str, params: Mapping[str, Any] | None = None,
                    settings: Mapping[str, int] | None = None) -> list[tuple]:
        # 64-bit integers as JSON numbers (not strings), so rows carry the same types as HttpTransport's.
        sql = f"{sql}\nSETTINGS {_settings_text({**(settings or {}), 'output_format_json_quote_64bit_integers': 0})}"
        res = await asyncio.to_thread(self._run, sql, params, "JSONCompactEachRow")
        return [tuple(orjson.loads(line)) for line in res.splitlines() if line]

    def raw_insert(self, sql: str, fmt: str, data: bytes) -> None:
        """Run the INSERT `sql` (no FORMAT clause) with `data` in input format `fmt` (binary formats
        included: chdb's streaming insert takes the bytes as a server's HTTP body). Blocking. Raises
        ClickHouseError."""
        with self._engine():
            try:
                with self._session.send_insert(sql, fmt) as ins:
                    ins.append(data)
                    ins.finish()
            except Exception as e:
                raise ClickHouseError(str(e)) from e

    async def insert(self, table: str, columns: Sequence[str], payload: bytes, fmt: str,
                     settings: Mapping[str, int] | None = None) -> None:
        cols = ", ".join(f"`{c}`" for c in columns)
        with_settings = f" SETTINGS {_settings_text(settings)}" if settings else ""
        await asyncio.to_thread(self.raw_insert, f"INSERT INTO {table} ({cols}){with_settings}", fmt, payload)

    def _ping(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # a statement took the engine since ping() looked: it is running
        try:
            self._session.query("SELECT 1", "CSV")
        except Exception as e:
            raise ClickHouseError(str(e)) from e
        finally:
            self._lock.release()

    async def ping(self) -> None:
        """A statement running in the engine (for under STALLED_S) is its answer; otherwise `SELECT 1`,
        on a thread of its own. So a health check never waits behind statements queued for the engine
        (a server answers `SELECT 1` beside them). Raises ClickHouseError."""
        since = self._busy_since
        if since is not None:
            if time.monotonic() - since < self.STALLED_S:
                return
            raise ClickHouseError(f"a statement has held the engine for over {self.STALLED_S:g} s")
        await asyncio.get_running_loop().run_in_executor(self._ping_thread, self._ping)

    async def close(self) -> None:
        """The engine stays (one per process, shared); nothing to close per store."""

    @classmethod
    def shutdown_all(cls) -> None:
        """Close every engine of this process (call once at the end: leaving one open to interpreter
        exit can crash the process while it tears down)."""
        for t in cls._instances.values():
            t._ping_thread.shutdown()
            with t._lock:
                t._session.close()
        cls._instances.clear()
