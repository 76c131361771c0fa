"""Retention figures of the collector benchmark (issue 17), run by bench_collector.bench_get_trace on its
loaded database while the collector process serves Exports.

- `retention_drop_day_ms` / `retention_drop_big_day_ms`: one day's drop (`Repository.drop_partition`:
  DETACH ... CONCURRENTLY + DROP TABLE) of a day of BENCH_COLLECTOR_SMALL_DAY_SPANS (200k; median of
  two such days) and of BENCH_COLLECTOR_BIG_DAY_SPANS (2M), with Exports flowing.
  `retention_drop_big_vs_small` = big / small (target ≤ 2: the drop must not depend on the day's size).
  `retention_drop_*_mb`: the day's size on disk (heap + TOAST + indexes), and `retention_drop_*_ms_per_mb`
  the DROP TABLE's time (drop minus detach) per MB freed: what the filesystem takes to free the files.
  Choice (issue 17): the figure is the whole drop as a pass runs it, freeing included; nothing is
  deferred to a step the figure does not see.
  The days lie before the retention window (the collector's own pass ran at its start-up; the next
  is an hour away) and were retired as a pass retires the oldest kept day the day before its drop
  (autovacuum off: `Repository.retire_partition`), after a VACUUM ANALYZE that stands for the 13 days
  of autovacuum such a day has seen, and a CHECKPOINT (a 13-day-old day's pages are on disk).
- Floor of the drop, same run: `retention_unlink_floor_day_ms` / `retention_unlink_floor_big_day_ms`, the
  time the same filesystem takes to unlink files of the same sizes as the day's relations (heap, TOAST
  and each index, in PostgreSQL's 1 GiB segments; written and fsynced first, beside the data
  directory), and `retention_unlink_floor_big_vs_small`: what no drop can go below when a day's files
  must be freed (`retention_drop_big_vs_unlink_floor` = the big drop / its floor).
- Before the drops (and before the floor's unlinks), the days' files leave the OS page cache
  (`_evict`): a day is dropped 14 days after it was written, 13 newer days of spans later. A hot day
  would add the kernel's freeing of its cached pages (≈ 0.2 ms per MB even on XFS, measured on this
  machine 2026-12-01), which no 14-day-old day has.
- Where the days' files live: `retention_days_filesystem` (e.g. `ext4 discard`: this VM's root is
  mounted with online discard, which makes every freed MB cost ≈ 0.4 ms). BENCH_SPANS_TABLESPACE_DIR
  (a directory) puts the collector database's partitions in a tablespace there (`spans_tablespace`),
  the deployment deploy/README.md recommends: spans on XFS, or on a filesystem without online discard.
- `export_max_ms` / `export_during_retention_max_ms` (`_p99_` from ≥ 1,000 Exports): per-Export latency (1000 spans, 4 clients, ack
  after commit) with no retention pass running, and while passes run back to back (the three loaded
  days, then empty days created and dropped; the same number of Exports each way, baseline and
  retention rounds alternating twice; 120 each way: maxima, not p99s). `export_max_retention_vs_baseline`
  = ratio (target ≤ 2).
"""
from __future__ import annotations

import asyncio
import os
import statistics
import time
from datetime import UTC, date, datetime

import asyncpg
import grpc

from services.tracecollector.repository import Partition, Repository, partition_name
from tests.bench.stats import tail

NS = 1_000_000_000
NS_PER_DAY = 86_400 * NS
SMALL = int(os.environ.get("BENCH_COLLECTOR_SMALL_DAY_SPANS", "200000")) // 5 * 5
BIG = int(os.environ.get("BENCH_COLLECTOR_BIG_DAY_SPANS", "2000000")) // 5 * 5
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _day(ns: int) -> date:
    return datetime.fromtimestamp(ns // NS, UTC).date()


async def _exports(port: int, payloads: list[bytes], stop: asyncio.Event | None, n: int,
                   clients: int = 4) -> list[float]:
    """Per-Export latencies (ms): `n` Exports over `clients` channels, or until `stop` is set (then
    at least `n`)."""
    lat: list[float] = []
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(clients)]
    count = 0

    async def client(ch: grpc.aio.Channel) -> None:
        nonlocal count
        export = ch.unary_unary(EXPORT_METHOD)
        while count < n or (stop is not None and not stop.is_set()):
            body = payloads[count % len(payloads)]
            count += 1
            t0 = time.perf_counter()
            await export(body, timeout=60)
            lat.append((time.perf_counter() - t0) * 1000)

    try:
        await asyncio.gather(*(c.channel_ready() for c in channels))
        await asyncio.gather(*(client(c) for c in channels))
    finally:
        for c in channels:
            await c.close()
    return lat


SEGMENT = 2**30  # PostgreSQL splits a relation's file every 1 GiB


def _evict(paths: list[str]) -> None:
    """Drop `paths` (and their 1 GiB segment files) from the OS page cache: a day dropped 14 days after
    it was written has long left it (13 newer days of spans went through the cache since). Freeing a
    file's cached pages costs time in proportion to them: a figure with a hot day would measure the
    kernel's page cache, not the drop of a 14-day-old day."""
    for path in paths:
        for seg in range(10_000):
            name = path if seg == 0 else f"{path}.{seg}"
            try:
                fd = os.open(name, os.O_RDONLY)
            except FileNotFoundError:
                break
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


async def _relation_paths(conn, table: str) -> list[str]:
    """Absolute paths of the first segment of every file set `_relation_sizes` counts."""
    base = await conn.fetchval("SHOW data_directory")
    return [os.path.join(base, r["p"]) for r in await conn.fetch(
        """SELECT pg_relation_filepath(c.oid) AS p FROM pg_class c
           WHERE c.oid = $1::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass)
              OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = $1::regclass)
              OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid =
                           (SELECT reltoastrelid FROM pg_class WHERE oid = $1::regclass))""", table)]


async def spans_tablespace(url: str) -> str | None:
    """With BENCH_SPANS_TABLESPACE_DIR set (a directory, e.g. on XFS), every table and index the
    database `url` creates from now on (the collector's day partitions) lives in a tablespace there
    (`ALTER DATABASE … SET default_tablespace`, what a DBA does to give spans their own volume).
    Returns the directory, or None when unset."""
    where = os.environ.get("BENCH_SPANS_TABLESPACE_DIR")
    if not where:
        return None
    conn = await asyncpg.connect(url)
    try:
        owner = os.stat(await conn.fetchval("SHOW data_directory")).st_uid
        loc = os.path.join(where, f"ts-{os.getpid()}-{time.time_ns()}")
        os.makedirs(loc, mode=0o700)
        os.chown(loc, owner, -1)  # the server's user owns a tablespace's directory
        name = os.path.basename(loc).replace("-", "_")
        await conn.execute(f"CREATE TABLESPACE {name} LOCATION '{loc}'")
        await conn.execute(f'ALTER DATABASE "{await conn.fetchval("SELECT current_database()")}" '
                           f"SET default_tablespace = {name}")
    finally:
        await conn.close()
    return loc


def filesystem_of(path: str) -> str:
    """`<type> <mount options that matter here>` of the mount holding `path` (e.g. `ext4 discard`:
    online discard makes freeing a file cost in proportion to its size)."""
    real, best = os.path.realpath(path), ("?", "/", "")
    with open("/proc/mounts") as f:
        for line in f:
            _, mnt, kind, opts, *_ = line.split()
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[1]):
                best = (kind, mnt, opts)
    return best[0] + (" discard" if "discard" in best[2].split(",") else "")


def _unlink_floor_ms(directory: str, sizes: list[int]) -> float:
    """Milliseconds to unlink files of `sizes` bytes (each split in SEGMENT files) written and fsynced
    in `directory` first: the filesystem's own cost of freeing what a DROP frees."""
    chunk = b"\0" * (8 * 2**20)
    paths = []
    for i, size in enumerate(sizes):
        for seg in range(max(1, -(-size // SEGMENT))):
            path = os.path.join(directory, f"unlink-floor-{i}.{seg}")
            left = min(SEGMENT, size - seg * SEGMENT)
            with open(path, "wb") as f:
                while left > 0:
                    left -= f.write(chunk[:min(left, len(chunk))])
                f.flush()
                os.fsync(f.fileno())
            paths.append(path)
    os.sync()
    _evict(paths)  # as the day's files are (see `_evict`)
    t0 = time.perf_counter()
    for path in paths:
        os.unlink(path)
    os.sync()  # the freeing is done when it is on disk, as at a DROP's commit
    return (time.perf_counter() - t0) * 1000


async def _relation_sizes(conn, table: str) -> list[int]:
    """Bytes of each file set a DROP of `table` frees: its heap, its TOAST table and index, its indexes."""
    return [r["n"] for r in await conn.fetch(
        """SELECT pg_relation_size(c.oid) AS n FROM pg_class c
           WHERE c.oid = $1::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass)
              OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = $1::regclass)
              OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid =
                           (SELECT reltoastrelid FROM pg_class WHERE oid = $1::regclass))""", table)]


async def retention_figures(pool, repo: Repository, load_day_sql: str, grpc_port: int, payloads: list[bytes],
                            now_ns: int, small: int = SMALL, big: int = BIG, per_round: int = 60) -> dict[str, float]:
    """The figures above: days of `small` / `big` spans (multiples of 5), `per_round` Exports per
    baseline / retention round (2 rounds each: too few for a p99, so the tails are maxima)."""
    SMALL, BIG = small, big  # noqa: N806 - the module's defaults, or a smoke run's sizes
    today = now_ns // NS_PER_DAY * NS_PER_DAY
    days = [(today - 16 * NS_PER_DAY, SMALL), (today - 17 * NS_PER_DAY, BIG), (today - 18 * NS_PER_DAY, SMALL)]
    t0 = time.perf_counter()
    for start, n in days:
        await repo.create_partition(_day(start))
        async with pool.acquire() as conn:
            await conn.execute(load_day_sql.format(part=partition_name(_day(start))),
                               time.strftime("%Y%m%d", time.gmtime(start // NS)), start, n,
                               (NS_PER_DAY - 10 * NS) // (n // 5))
            await conn.execute(f"VACUUM ANALYZE traces.{partition_name(_day(start))}")
    async with pool.acquire() as conn:
        # A day is dropped 14 days after it was written: its pages are long on disk. Without this
        # the drop would also wait for the kernel to finish writing back the load of a moment ago.
        await conn.execute("CHECKPOINT")
    parts = {start: Partition(partition_name(_day(start)), _day(start), False) for start, _ in days}
    async with pool.acquire() as conn:  # what a drop frees: heap, TOAST and the four indexes
        mb = {start: await conn.fetchval(f"SELECT pg_total_relation_size('traces.{p.name}')") / 2**20
              for start, p in parts.items()}
        files = {start: await _relation_sizes(conn, f"traces.{p.name}") for start, p in parts.items()}
        paths = {start: await _relation_paths(conn, f"traces.{p.name}") for start, p in parts.items()}
    # The floor's files go on the days' own filesystem (their tablespace's, when there is one).
    beside = os.path.dirname(os.path.dirname(os.path.realpath(paths[days[0][0]][0])))
    floor = {start: await asyncio.to_thread(_unlink_floor_ms, beside, files[start]) for start, _ in days}
    for p in parts.values():
        while not await repo.retire_partition(p):
            await asyncio.sleep(0.5)
    for start in paths:
        await asyncio.to_thread(_evict, paths[start])
    load_s = time.perf_counter() - t0
    drops: dict[int, float] = {}
    baseline: list[float] = []
    during: list[float] = []
    empty = iter(range(19, 400))
    await _exports(grpc_port, payloads, None, 8)  # warm-up
    for rnd in range(2):
        baseline += await _exports(grpc_port, payloads, None, per_round)
        stop = asyncio.Event()

        async def passes(rnd: int = rnd, stop: asyncio.Event = stop) -> None:
            try:
                todo = [start for start, _ in days][rnd::2] if rnd == 0 else [days[1][0]]
                done = 0
                while done < per_round // 6 or todo:  # at least ~10 passes per round
                    await asyncio.sleep(0.05)
                    if todo:
                        start = todo.pop(0)
                        drops[start] = await repo.drop_partition(parts[start])
                    else:
                        d = _day(today - next(empty) * NS_PER_DAY)
                        await repo.create_partition(d)
                        await repo.drop_partition(Partition(partition_name(d), d, False))
                    done += 1
            finally:
                stop.set()

        lat, _ = await asyncio.gather(_exports(grpc_port, payloads, stop, per_round), passes())
        during += lat
    small = statistics.median([sum(drops[days[0][0]]), sum(drops[days[2][0]])]) * 1000
    big = sum(drops[days[1][0]]) * 1000
    small_detach = statistics.median([drops[days[0][0]][0], drops[days[2][0]][0]]) * 1000
    big_detach = drops[days[1][0]][0] * 1000
    tail_base, tail_during = tail("export", baseline), tail("export_during_retention", during)
    return {
        "retention_drop_day_ms": small, "retention_drop_day_spans": float(SMALL),
        "retention_drop_big_day_ms": big, "retention_drop_big_day_spans": float(BIG),
        "retention_drop_big_vs_small": big / small,
        "retention_detach_day_ms": small_detach, "retention_detach_big_day_ms": big_detach,
        "retention_detach_big_vs_small": big_detach / small_detach, "retention_bench_load_s": load_s,
        "retention_drop_day_mb": statistics.median([mb[days[0][0]], mb[days[2][0]]]),
        "retention_drop_big_day_mb": mb[days[1][0]],
        "retention_drop_big_ms_per_mb": (big - big_detach) / mb[days[1][0]],
        "retention_drop_day_ms_per_mb": (small - small_detach) / statistics.median([mb[days[0][0]], mb[days[2][0]]]),
        "retention_days_filesystem": filesystem_of(beside),
        "retention_unlink_floor_day_ms": statistics.median([floor[days[0][0]], floor[days[2][0]]]),
        "retention_unlink_floor_big_day_ms": floor[days[1][0]],
        "retention_unlink_floor_big_vs_small": floor[days[1][0]] / statistics.median([floor[days[0][0]], floor[days[2][0]]]),
        "retention_drop_big_vs_unlink_floor": big / floor[days[1][0]],
        "export_p50_ms": statistics.median(baseline), **tail_base, **tail_during,
        f"export_{'p99' if 'export_p99_ms' in tail_base else 'max'}_retention_vs_baseline":
            next(iter(tail_during.values())) / next(iter(tail_base.values())),
        "export_samples_per_phase": float(min(len(baseline), len(during))),
    }
