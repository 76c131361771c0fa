"""Wake-ups of the change feed's streams (issue 24): `LISTEN feedback_feed` on one connection of its own
per process, and `NOTIFY feedback_feed` sent after this process's writes commit.

Why not NOTIFY inside the writing transaction (a trigger): PostgreSQL serializes the commits of
notifying transactions on one lock, so concurrent writers stop sharing WAL flushes (measured with 8
writers: a third of their throughput). Instead `poke()` (called after a write RPC or a capture pass)
sends one NOTIFY (on the listening connection while it is up, else on a pool connection), at once when
none was sent in the last `NOTIFY_GAP_S`, else at the end of that gap for every poke made meanwhile,
so a notification always follows the last commit and a stream of writes sends at most one NOTIFY per
`NOTIFY_GAP_S` (measured: without the gap, 4 concurrent raters sent one NOTIFY per put or two, a
statement as dear as the put's own; a lone write is announced without waiting). Every replica's
listener receives it.
A change written outside the service (hand-run SQL) is seen at the next wake-up of any kind.

While the listening connection is lost, streams are woken every `FALLBACK_S` instead (no missed
change: a woken stream reads from its own position), and once more when it is back.

Subscriptions' wake-ups (`subscriptions_changed()`): a webhook subscription created or resumed on any
replica (`announce_subscriptions()`, a NOTIFY with the payload `webhooks`), the listener's (re)connect and
each fallback wake-up. The webhook worker of a replica that saw no ACTIVE subscription waits on these
alone, so writes cost it nothing while nobody subscribes.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import asyncpg
import grpc

from services.common import db
from services.common.depfail import DATABASE_CONNECTION_ERRORS

log = logging.getLogger(__name__)

CHANNEL = "feedback_feed"
# A NOTIFY's own transaction waits for no disk flush: it writes no WAL before its commit record, and
# PostgreSQL flushes such a commit asynchronously whatever synchronous_commit says (RecordTransactionCommit;
# measured on PostgreSQL 18: 0.01 WAL fsyncs a NOTIFY, an INSERT 1.00). So the NOTIFY after a create costs
# no second flush, and turning synchronous_commit off for it changed nothing (issue 29: fsyncs per create
# 1.38 with it on, 1.42 off).
NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"
SUBSCRIPTIONS_PAYLOAD = "webhooks"
NOTIFY_SUBSCRIPTIONS = f"SELECT pg_notify('{CHANNEL}', '{SUBSCRIPTIONS_PAYLOAD}')"
RECONNECT_FIRST_S, RECONNECT_MAX_S = 0.1, 5.0
FALLBACK_S = 1.0
NOTIFY_GAP_S = 0.01  # what a wake-up may lag a commit while writes keep coming (then one NOTIFY per gap)
CONNECT_TIMEOUT_S = 2.0
# Seconds a NOTIFY on the listening connection may take before it is sent on the pool instead.
NOTIFY_TIMEOUT_S = 2.0
# What a statement or a connect fails with while the database is down or a connection was lost: depfail's
# one list (asyncpg's InternalClientError included: a NOTIFY on a connection whose FATAL was read but not
# yet its close) plus any statement error.
_DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, *DATABASE_CONNECTION_ERRORS)


class FeedWakeups:
    """`changed()`: an asyncio.Event set at the next wake-up (take it before reading, then wait on it)."""

    def __init__(self, url: str, pool: asyncpg.Pool):
        self._url, self._pool = url, pool
        self._event = asyncio.Event()
        self._subscriptions = asyncio.Event()
        self._generation = 0
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task | None = None
        self._poker: asyncio.Task | None = None
        self._dirty = False
        self._last_notify = -NOTIFY_GAP_S
        self._lost = asyncio.Event()
        self.listening = False

    def changed(self) -> asyncio.Event:
        return self._event

    def subscriptions_changed(self) -> asyncio.Event:
        """An asyncio.Event set when webhook subscriptions may have changed (take it before reading)."""
        return self._subscriptions

    def wake_subscriptions(self) -> None:
        """Wake this process's webhook worker (and its streams: a subscription change is a change too)."""
        ev, self._subscriptions = self._subscriptions, asyncio.Event()
        ev.set()
        self.wake()

    async def announce_subscriptions(self) -> None:
        """Tell every replica's webhook worker that a subscription was created or resumed (after its commit)."""
        self.wake_subscriptions()
        try:
            await self._pool.execute(NOTIFY_SUBSCRIPTIONS)
        except _DB_ERRORS as e:
            # The other replicas see it when their listener is back (a reconnect wakes subscriptions too).
            log.info("change feed: subscriptions NOTIFY not sent (%s)", type(e).__name__)

    @property
    def generation(self) -> int:
        """How many wake-ups this process has had: a read started at generation g saw every commit
        announced up to g (the NOTIFY is sent after its commit)."""
        return self._generation

    def wake(self) -> None:
        """Wake every stream of this process now."""
        ev, self._event = self._event, asyncio.Event()
        self._generation += 1
        ev.set()

    def poke(self) -> None:
        """Tell every replica's streams that something committed (one NOTIFY, at most one per NOTIFY_GAP_S)."""
        self._dirty = True
        if self._poker is None or self._poker.done():
            self._poker = asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        while self._dirty:
            if (wait := self._last_notify + NOTIFY_GAP_S - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            self._dirty = False
            self._last_notify = time.monotonic()
            try:
                await self._send_notify()
            except _DB_ERRORS as e:
                # The database is down: nothing committed either; the listener's return wakes everyone.
                log.info("change feed: NOTIFY not sent (%s)", type(e).__name__)
                self.wake()
                return

    async def _send_notify(self) -> None:
        """NOTIFY on the listening connection while it is up (PostgreSQL delivers it to every listener,
        this session's too), else on a pool connection. The listening connection is idle but for the
        NOTIFYs (`_notify` is the one task that sends them, one at a time), and sparing the pool's
        acquire and release (each with its own timeout) cut a NOTIFY's CPU in this process from ≈ 240
        to ≈ 60 µs (issue 29; at most one per NOTIFY_GAP_S: a quarter of the puts at 400 a second).
        A NOTIFY that fails there is sent on the pool: a lost listening connection must not cost the
        other replicas the announcement."""
        conn = self._conn if self.listening else None
        if conn is not None and not conn.is_closed():
            try:
                await conn.execute(NOTIFY, timeout=NOTIFY_TIMEOUT_S)
                return
            except _DB_ERRORS:  # TimeoutError is an OSError
                pass  # the listener notices its loss itself (_on_termination)
        await self._pool.execute(NOTIFY)

    def _on_notification(self, _conn, _pid, _channel, payload: str) -> None:
        if payload == SUBSCRIPTIONS_PAYLOAD:
            self.wake_subscriptions()
        else:
            self.wake()

    def _on_termination(self, *_args) -> None:
        self._lost.set()

    async def start(self) -> None:
        """Listen (the first connection is made before this returns when the database is up)."""
        with contextlib.suppress(*_DB_ERRORS):
            await self._connect()
        self._task = asyncio.get_running_loop().create_task(self._keep_listening())

    async def _connect(self) -> None:
        # The shared opener: each host of a multi-host URL gets its own timeout (a hung first host would
        # otherwise take the whole CONNECT_TIMEOUT_S on every try and the listener never come back).
        conn = await db.connect(self._url, timeout=CONNECT_TIMEOUT_S, host_timeout_s=CONNECT_TIMEOUT_S)
        await conn.add_listener(CHANNEL, self._on_notification)
        conn.add_termination_listener(self._on_termination)
        self._lost.clear()
        self._conn, self.listening = conn, True
        self.wake_subscriptions()  # anything committed while nobody listened (subscriptions too)

    async def _keep_listening(self) -> None:
        delay = RECONNECT_FIRST_S
        while True:
            if self.listening:
                await self._lost.wait()
                self.listening = False
                log.warning("change feed: the LISTEN connection was lost; reconnecting")
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.terminate()
            try:
                await self._connect()
                delay = RECONNECT_FIRST_S
                log.info("change feed: listening again")
            except _DB_ERRORS:
                # Streams and the webhook worker look at the database themselves meanwhile (each from its position).
                self.wake_subscriptions()
                await asyncio.sleep(min(delay, FALLBACK_S))
                delay = min(delay * 2, RECONNECT_MAX_S)

    async def stop(self) -> None:
        for t in (self._task, self._poker):
            if t is not None:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.close(), 2.0)
            self._conn = None
        self.wake_subscriptions()


class PokeAfterWrites(grpc.aio.ServerInterceptor):
    """Pokes the wake-ups after each call of `methods` (full names) ends, whatever its outcome: a
    write that committed is then announced to every replica's streams."""

    def __init__(self, wakeups: FeedWakeups, methods: frozenset[str]):
        self._wakeups, self._methods = wakeups, methods
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method not in self._methods or not handler.unary_unary:
            return handler
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        behavior, wakeups = handler.unary_unary, self._wakeups

        async def wrapped(request, context):
            try:
                return await behavior(request, context)
            finally:
                wakeups.poke()

        out = grpc.unary_unary_rpc_method_handler(wrapped, request_deserializer=handler.request_deserializer,
                                                  response_serializer=handler.response_serializer)
        self._wrapped[method] = (handler, out)
        return out
