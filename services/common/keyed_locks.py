"""Per-key asyncio locks of one process, each kept only while it is held or awaited (memory: one
entry per key in use). The one helper for "one at a time per owner in this replica" (the write
quota's lease requests, the stored-report cap's creates)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyedLocks:
    """`async with locks.hold(key):` runs one holder per key at a time, the others queued (FIFO)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # key → lock, [holder + waiters]

    def __len__(self) -> int:
        """Keys held or awaited now."""
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]
