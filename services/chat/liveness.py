"""Which gateway process owns a running turn, and whether that process is still alive.

Each gateway process holds, for its whole life, a PostgreSQL session-level advisory lock on one dedicated
connection (not a pool's: the pool's connections skip the reset that would release it), keyed by a random
63-bit id minted at start (`ProcessLock.key`). Each turn attempt records that key (`turns.attempt_owner`,
migration 0050). PostgreSQL releases a session lock when its backend's connection goes away, and a killed
process's socket is closed by the kernel, so "the attempt's owner is dead" = no session holds its key:
`OWNER_ALIVE_SQL` reads `pg_locks`, which sees every session's locks (every replica's), and changes
nothing (pg_try_advisory_lock + unlock from a pooled connection would briefly take a dead owner's key).

Not covered (the stale-time rule, services.chat.turn.STALE_MARGIN_S, stays the fallback): a partition
where PostgreSQL has not yet noticed the dead peer (its backend holds the lock until TCP keepalive ends
it), and rows without an owner (written before migration 0050). When this process loses its lock
connection it reconnects and takes the same key again; meanwhile a retry may take over its running
turns, whose replies are then not stored (the FINISH_TURN ownership check), never stored twice.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

import asyncpg

from services.common.db import connect

log = logging.getLogger(__name__)

RECONNECT_S = 1.0  # between tries to take the lock again after its connection was lost
# SQL: whether the session advisory lock on the bigint key in `{key}` is held by any session of this
# database (pg_locks shows a bigint key as classid = high 32 bits, objid = low 32 bits, objsubid = 1).
OWNER_ALIVE_SQL = """EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND classid = ({key} >> 32)::oid AND objid = ({key} & 4294967295)::oid)"""


class ProcessLock:
    """The process's liveness lock: `await ProcessLock.hold(url)`, `key` to record, `close()` at stop.
    Raises asyncpg/OSError errors from `hold` when PostgreSQL cannot be reached."""

    def __init__(self, url: str, key: int):
        self.key = key  # 1 .. 2**63-1: recorded in turns.attempt_owner
        self._url = url
        self._conn: asyncpg.Connection | None = None
        self._closed = False
        self._relock: asyncio.Task | None = None

    @classmethod
    async def hold(cls, url: str) -> ProcessLock:
        lock = cls(url, secrets.randbits(63) or 1)
        await lock._take()
        return lock

    async def _take(self) -> None:
        conn = await connect(self._url)
        try:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1::bigint)", self.key):
                raise RuntimeError(f"advisory lock {self.key} is held by another session")  # a 2**-63 clash
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._lost)
        self._conn = conn

    def _lost(self, _conn: asyncpg.Connection) -> None:
        if not self._closed and (self._relock is None or self._relock.done()):
            log.warning("lost the connection holding the process's liveness lock; taking it again")
            self._relock = asyncio.get_running_loop().create_task(self._take_again())

    async def _take_again(self) -> None:
        while not self._closed:
            try:
                await self._take()
                log.info("liveness lock taken again")
                return
            except Exception as e:  # noqa: BLE001 - PostgreSQL is down or restarting: keep trying
                log.debug("liveness lock: %s", e)
                await asyncio.sleep(RECONNECT_S)

    async def close(self) -> None:
        """Release the lock (the connection closes): this process's running attempts count as dead."""
        self._closed = True
        if self._relock is not None:
            self._relock.cancel()
        if self._conn is not None and not self._conn.is_closed():
            self._conn.remove_termination_listener(self._lost)
            await self._conn.close()
