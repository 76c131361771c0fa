"""Partition management: daily partitions made ahead, whole days dropped past the retention window.

Rule (docs/architecture.md "Storage and retention", issue 4, case F18): with `retention_days` = N, the collector
keeps the partitions of the UTC days that start at or after now − N × 24 h (N days: the N − 1
previous days and today), and partitions for `partitions_ahead_days` days after today; see
`ingest.first_retained_day_ns`. Older days are dropped whole (DETACH ... CONCURRENTLY + DROP TABLE, repository.py),
never with row DELETEs, so a day's drop costs the same whatever its size and does not stall ingest.
Spans outside the kept days are rejected at ingest (ingest.Window), never stored in a catch-all.

`plan(...)` is pure; `Retention.run_once()` applies it; `Retention.run_forever()` repeats it every
`interval_s` (a failed pass is logged and retried at the next interval).

On ClickHouse (`TtlRetention`) the table's TTL expires spans by itself (daily partitions, whole parts);
the pass drops, at once, every stored day before the first kept day by the same rule, so both stores
keep exactly the same days at any clock (and tests can move the clock), and the attribute lookup's
weekly partitions once their last day is past (searches are clamped to the kept days meanwhile).
"""
from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

from services.common.incidents import log_failure
from services.tracecollector.ingest import first_retained_day_ns, utc_day
from services.tracecollector.repository import Partition, Repository

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """Days to create (missing, oldest first) and partitions to drop (oldest first)."""

    create: list[date]
    drop: list[Partition]
    retire: list[Partition]  # the oldest kept day: dropped by a pass tomorrow (autovacuum off now)
    settle: list[Partition]  # kept days that have ended (their attribute index's pending list merged)


def kept_days(now_ns: int, retention_days: int, ahead_days: int) -> tuple[date, date]:
    """(first, last) UTC day whose partition should exist at `now_ns` (inclusive)."""
    today = utc_day(now_ns).date()
    first = utc_day(first_retained_day_ns(now_ns, retention_days)).date()
    return first, today + timedelta(days=ahead_days)


def plan(existing: list[Partition], now_ns: int, retention_days: int, ahead_days: int) -> Plan:
    """What one retention pass does at `now_ns` given the `existing` partitions."""
    first, last = kept_days(now_ns, retention_days, ahead_days)
    have = {p.day for p in existing}
    create = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    drop = [p for p in existing if p.day < first or p.detach_pending]
    kept = [p for p in existing if p not in drop]
    today = utc_day(now_ns).date()
    return Plan(
        create=[d for d in create if d not in have],
        drop=drop,
        retire=[p for p in kept if p.day == first],
        settle=[p for p in kept if p.day < today],
    )


@dataclass(frozen=True)
class PassResult:
    created: list[date]
    dropped: list[date]
    drop_ms: list[float]


class Retention:
    """Runs retention passes against `repo`. `clock()` returns nanoseconds since the epoch."""

    def __init__(
        self,
        repo: Repository,
        *,
        retention_days: int,
        ahead_days: int,
        interval_s: float,
        clock: Callable[[], int] = time.time_ns,
    ):
        self._repo = repo
        self._days = retention_days
        self._ahead = ahead_days
        self._interval_s = interval_s
        self._clock = clock
        self._lock = asyncio.Lock()
        # Optional `(ok, dropped_days)` hook called after every pass (the collector's metrics).
        self.on_pass: Callable[[bool, int], None] | None = None

    async def run_once(self, now_ns: int | None = None) -> PassResult:
        """One pass at `now_ns` (default: the clock): create missing partitions, drop expired days.

        Raises asyncpg errors (e.g. lock_timeout) when a DDL statement could not run; partitions
        already handled stay handled, the rest is retried by the next pass.
        """
        now = self._clock() if now_ns is None else now_ns
        async with self._lock:
            await self._repo.drop_leftovers()
            p = plan(await self._repo.partitions(), now, self._days, self._ahead)
            for day in p.create:
                await self._repo.create_partition(day)
            timings = []
            for part in p.drop:
                detach_s, drop_s = await self._repo.drop_partition(part)
                timings.append((detach_s + drop_s) * 1000)
                log.info("retention: dropped spans of %s (detach %.1f ms, drop %.1f ms)",
                         part.day, detach_s * 1000, drop_s * 1000)
            if p.create:
                log.info("retention: created partitions %s..%s", p.create[0], p.create[-1])
            for part in p.retire:
                if not await self._repo.retire_partition(part):
                    log.info("retention: %s is busy (autovacuum?); retiring it at the next pass", part.day)
            for part in p.settle:
                await self._repo.settle_partition(part)
            if self.on_pass is not None:
                self.on_pass(True, len(p.drop))
        return PassResult(p.create, [x.day for x in p.drop], timings)

    async def run_forever(self) -> None:
        """Repeat `run_once` every `interval_s` until cancelled."""
        await _repeat(self)


class TtlRetention:
    """Retention passes for the ClickHouse store (`clickhouse.ClickHouseStore`): nothing to create
    ahead (ClickHouse makes a day's partition on its first insert); days older than the window are
    dropped whole (`ALTER TABLE ... DROP PARTITION`) and recorded. Same interface as `Retention`."""

    def __init__(self, store, *, retention_days: int, interval_s: float, clock: Callable[[], int] = time.time_ns):
        self._store = store
        self._days = retention_days
        self._interval_s = interval_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self.on_pass: Callable[[bool, int], None] | None = None

    async def run_once(self, now_ns: int | None = None) -> PassResult:
        """One pass at `now_ns` (default: the clock). Raises ClickHouseError; days already dropped
        stay dropped, the rest is retried by the next pass."""
        now = self._clock() if now_ns is None else now_ns
        first = utc_day(first_retained_day_ns(now, self._days)).date()
        async with self._lock:
            dropped, timings = [], []
            for day in await self._store.stored_days():
                if day < first:
                    t0 = time.perf_counter()
                    await self._store.drop_day(day)
                    timings.append((time.perf_counter() - t0) * 1000)
                    dropped.append(day)
                    log.info("retention: dropped spans of %s (%.1f ms)", day, timings[-1])
            for monday in await self._store.drop_weeks_before(first):
                log.info("retention: dropped the attribute lookup's and trace table's week of %s", monday)
            if self.on_pass is not None:
                self.on_pass(True, len(dropped))
        return PassResult([], dropped, timings)

    async def run_forever(self) -> None:
        """Repeat `run_once` every `interval_s` until cancelled."""
        await _repeat(self)


async def _repeat(r: Retention | TtlRetention) -> None:
    """`r.run_once()` every `r._interval_s` until cancelled (a failed pass is logged, retried later)."""
    while True:
        await asyncio.sleep(r._interval_s)
        try:
            await r.run_once()
        except asyncio.CancelledError:
            raise
        except Exception:
            if r.on_pass is not None:
                r.on_pass(False, 0)
            log_failure(log, f"retention pass failed; retrying in {r._interval_s:.0f} s", sys.exc_info()[1])
