"""The bounded group-commit writer of the collector: spans of concurrent Export calls share one COPY,
and an Export is answered only after the COPY holding its spans committed.

No OTLP, gRPC or asyncpg here: the writer is handed the repository's COPY function.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from services.common.depfail import is_database_down
from services.common.incidents import INCIDENTS

log = logging.getLogger(__name__)

# A storage row (column order: ingest.ROW_FIELDS).
Row = tuple


class Overloaded(Exception):
    """The write queue is full: retry after `retry_after_s` seconds (nothing of the request was stored)."""

    def __init__(self, retry_after_s: float, queued_spans: int, what: str = "spans"):
        # `what`: the items queued (the logs receiver's bound counts evaluations, logs.py).
        where = "span write queue" if what == "spans" else f"{what} queue"
        super().__init__(f"{where} full ({queued_spans} {what} waiting); retry in {retry_after_s:g} s")
        self.retry_after_s = retry_after_s
        self.queued_spans = queued_spans


@dataclass
class _Pending:
    rows: list[Row]
    reserved: int
    done: asyncio.Future


class BatchWriter:
    """Bounded write queue with group commit.

    `write(rows)` resolves once `rows` are committed. Concurrent callers' rows are concatenated into
    one COPY (up to `batch_max_spans` rows) by one of `workers` worker tasks, so many small Exports
    cost one round trip. Memory is bounded: `reserve(n)` admits a request only while the spans
    reserved and not yet committed stay ≤ `max_spans` (a request larger than the bound alone is
    admitted when nothing is queued), else raises `Overloaded`. Rows of a batch whose COPY fails are
    retried request by request, so one bad request never fails the others.

    `copy(rows)` is the repository's COPY (committed when it returns).
    """

    def __init__(
        self,
        copy: Callable[[Sequence[Row]], Awaitable[None]],
        *,
        max_spans: int,
        batch_max_spans: int,
        workers: int,
        retry_after_s: float,
    ):
        self._copy = copy
        self._max = max_spans
        self._batch_max = batch_max_spans
        self._retry_after_s = retry_after_s
        self._pending: deque[_Pending] = deque()
        self._reserved = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._tasks = [asyncio.create_task(self._worker(), name=f"span-writer-{i}") for i in range(workers)]

    @property
    def queued_spans(self) -> int:
        """Spans admitted and not yet committed (the bounded quantity)."""
        return self._reserved

    def reserve(self, n: int) -> None:
        """Admit `n` spans or raise `Overloaded` (call before decoding the request further)."""
        if self._closing:
            raise Overloaded(self._retry_after_s, self._reserved)
        if self._reserved and self._reserved + n > self._max:
            raise Overloaded(self._retry_after_s, self._reserved)
        self._reserved += n

    def release(self, n: int) -> None:
        """Give back a reservation that will not be written (e.g. every span was rejected)."""
        self._reserved -= n

    async def write(self, rows: list[Row], reserved: int) -> None:
        """Queue `rows` (under a `reserve(reserved)` made earlier); returns once they are committed.

        Raises the COPY's exception when the rows could not be stored. A cancelled caller does not
        cancel the write (its rows are committed anyway; a retry is deduplicated at read time).
        """
        fut = asyncio.get_running_loop().create_future()
        # A caller cancelled meanwhile never reads the outcome: mark it retrieved (no loop warning).
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._pending.append(_Pending(rows, reserved, fut))
        self._wake.set()
        await asyncio.shield(fut)

    async def _worker(self) -> None:
        while True:
            while not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
            batch: list[_Pending] = []
            n = 0
            while self._pending and (not batch or n + len(self._pending[0].rows) <= self._batch_max):
                p = self._pending.popleft()
                batch.append(p)
                n += len(p.rows)
            if self._pending:
                self._wake.set()  # another worker may take the rest meanwhile
            try:
                await self._store(batch)
            finally:
                for p in batch:
                    self._reserved -= p.reserved

    async def _store(self, batch: list[_Pending]) -> None:
        try:
            if len(batch) == 1:
                await self._copy(batch[0].rows)
            else:
                await self._copy([r for p in batch for r in p.rows])
        except asyncio.CancelledError:
            for p in batch:
                if not p.done.done():
                    p.done.set_exception(Overloaded(self._retry_after_s, self._reserved))
            raise
        except Exception as e:
            if len(batch) == 1:
                if is_database_down(e):  # expected while PostgreSQL is down: one line per incident
                    INCIDENTS.failure("DATABASE_UNAVAILABLE", f"storing {len(batch[0].rows)} spans failed", e)
                else:
                    log.exception("storing %d spans failed", len(batch[0].rows))
                failed = RuntimeError("storing spans failed")
                failed.__cause__ = e  # read by the Export answer (services.common.depfail)
                batch[0].done.set_exception(failed)
                return
            for p in batch:
                await self._store([p])
            return
        for p in batch:
            if not p.done.done():
                p.done.set_result(None)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop admitting, write what is queued (up to `timeout_s`), then stop the workers."""
        self._closing = True
        self._wake.set()
        _, pending = await asyncio.wait(self._tasks, timeout=timeout_s)
        for t in pending:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
