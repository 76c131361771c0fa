"""Per-key asyncio locks of one process, each kept only while it is held or awaited (memory: one
entry per key in use). The one helper for "one at a time per owner in this replica" (the write
quota's lease requests, the stored-report cap's creates).

A holder that finds the database unreachable (`depfail.is_database_down`) fails the waiters queued
behind it at that moment at once, with DatabaseTimeout (UNAVAILABLE DATABASE_UNAVAILABLE): each would
otherwise wait its own whole bound in turn (issue 25: with PostgreSQL frozen, four writes of one owner
answered after one, two, three and four command timeouts). A waiter for an RPC with a deadline waits
at most until `deadlines.reserved` of it, then raises DatabaseTimeout too (what it waits for is a
statement ahead of it).
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from services.common import deadlines
from services.common.depfail import DatabaseTimeout, is_database_down


@dataclass
class _Key:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holder + waiters
    outages: int = 0  # holders that found the database unreachable


class KeyedLocks:
    """`async with locks.hold(key):` runs one holder per key at a time, the others queued (FIFO)."""

    def __init__(self) -> None:
        self._locks: dict[str, _Key] = {}

    def __len__(self) -> int:
        """Keys held or awaited now."""
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Raises DatabaseTimeout without running the block when a holder ahead of this one found the
        database unreachable while this one waited, or the RPC's deadline is near."""
        k = self._locks.setdefault(key, _Key())
        k.users += 1
        seen = k.outages
        try:
            r = deadlines.remaining()
            try:
                await asyncio.wait_for(k.lock.acquire(), None if r is None else deadlines.reserved(r, r))
            except TimeoutError:
                raise DatabaseTimeout("the database did not answer the calls queued ahead of this one in time")
            try:
                if k.outages != seen:
                    raise DatabaseTimeout("the database did not answer the call queued ahead of this one")
                yield
            except Exception as e:
                if is_database_down(e) or is_database_down(e.__cause__ or e.__context__ or e):
                    k.outages += 1
                raise
            finally:
                k.lock.release()
        finally:
            k.users -= 1
            if k.users == 0:
                del self._locks[key]
