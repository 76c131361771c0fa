"""The PostgreSQL span store (store.SpanStore's embedded default): all its SQL (schema `traces`,
migrations in ./migrations).

Writes are COPY (asyncpg `copy_records_to_table`, binary protocol) into the partitioned `spans`
table; each COPY is one statement, committed when it returns. Reads collapse the rows of one
(trace_id, span_id) to one span: exporter retries re-send spans, and rows are never de-duplicated
on write (see migrations/0001_spans.sql).

Partitions: `spans_pYYYYMMDD` for [day 00:00 UTC, next day 00:00 UTC) on `start_ns`. Created as a
plain table then ATTACHed (SHARE UPDATE EXCLUSIVE on `spans`, which does not conflict with COPY);
dropped with DETACH ... CONCURRENTLY then DROP TABLE, so neither stalls ingest. DDL runs with a
`lock_timeout` so it never queues in front of writers for long.
"""
from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

import asyncpg

from services.tracecollector.ingest import NS_PER_DAY, ROW_FIELDS, day_start_ns
from services.tracecollector.writer import Row

SCHEMA = "traces"
SPAN_COLUMNS = ROW_FIELDS
_PARTITION = re.compile(r"^spans_p(\d{8})$")
DDL_LOCK_TIMEOUT = "2s"

# --- partitions ---

LIST_PARTITIONS = """
SELECT c.relname AS name, i.inhdetachpending AS detach_pending
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = 'traces.spans'::regclass AND n.nspname = 'traces'
"""
# Tables named like partitions that are not attached (a drop interrupted after DETACH).
LIST_DETACHED = """
SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'traces' AND c.relkind = 'r' AND c.relname ~ '^spans_p[0-9]{8}$'
  AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)
"""
PARTITION_DDL_LOCK = "SELECT pg_advisory_xact_lock(hashtext('traces.spans partitions'))"
SET_LOCK_TIMEOUT = f"SET lock_timeout = '{DDL_LOCK_TIMEOUT}'"
RESET_LOCK_TIMEOUT = "RESET lock_timeout"
# Identifiers below are built only from a date (spans_pYYYYMMDD), never from input.
CREATE_PARTITION_TABLE = "CREATE TABLE IF NOT EXISTS traces.{name} (LIKE traces.spans INCLUDING DEFAULTS)"
# The day's attribute index, made on the empty table so ATTACH adopts it as its part of
# spans_attributes_idx (same definition as migrations/0002) with a 64 kB GIN pending list
# (migrations/0003: a partitioned index takes no storage options; every search reads the list).
CREATE_ATTRIBUTE_INDEX = """CREATE INDEX IF NOT EXISTS {name}_attributes_idx ON traces.{name}
USING gin (attributes jsonb_path_ops) WITH (gin_pending_list_limit = 64)"""
ATTACH_PARTITION = "ALTER TABLE traces.spans ATTACH PARTITION traces.{name} FOR VALUES FROM ({lo}) TO ({hi})"
DETACH_CONCURRENTLY = "ALTER TABLE traces.spans DETACH PARTITION traces.{name} CONCURRENTLY"
DETACH_FINALIZE = "ALTER TABLE traces.spans DETACH PARTITION traces.{name} FINALIZE"
DROP_TABLE = "DROP TABLE IF EXISTS traces.{name}"
# A day about to expire: no autovacuum from now on. A running autovacuum holds SHARE UPDATE EXCLUSIVE,
# which DETACH ... CONCURRENTLY must wait for (an autovacuum yields only after deadlock_timeout, 1 s:
# the 58 ms / 1,084 ms drops of issue 17); nothing reads the day's statistics any more by the next pass.
RETIRE_PARTITION = "ALTER TABLE traces.{name} SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)"
RETIRE_LOCK_TIMEOUT = "SET lock_timeout = '200ms'"
# A day that has ended: merge its attribute index's pending list (GIN fastupdate, ≤ 4 MB that every
# attribute search would otherwise read in full); the day gets no more inserts, so once is enough.
CLEAN_PENDING = """
SELECT coalesce(sum(gin_clean_pending_list(x.indexrelid)), 0)::bigint FROM pg_index x
JOIN pg_inherits i ON i.inhrelid = x.indexrelid AND i.inhparent = 'traces.spans_attributes_idx'::regclass
WHERE x.indrelid = 'traces.{name}'::regclass"""
RECORD_DROPPED_DAY = "INSERT INTO traces.dropped_days(day) VALUES ($1) ON CONFLICT (day) DO NOTHING"
DAY_DROPPED = "SELECT EXISTS (SELECT 1 FROM traces.dropped_days WHERE day = $1)"

# --- reads ---

_SPAN_SELECT = """
trace_id, span_id, parent_span_id, start_ns, end_ns, name, kind, status_code, status_message,
service_name, scope_name, trace_state, attributes, resource_attributes, events, links,
dropped_attributes_count, dropped_events_count, dropped_links_count, resource_dropped_attributes_count
"""
# One row per span id (retries de-duplicated), ordered by start then span id (Trace.spans order).
GET_TRACE = f"""
SELECT * FROM (
  SELECT DISTINCT ON (span_id) {_SPAN_SELECT}
  FROM traces.spans WHERE trace_id = $1
  ORDER BY span_id
) s ORDER BY start_ns, span_id
"""

# SearchTraces (issue 17). A trace matches when one of its spans in [$1, $2) passes every filter; it
# sorts by its earliest matching span's start, newest first. `search_trace_ids` walks matching spans
# newest first in growing time windows (SEARCH_WALK: an index scan backwards, LIMIT), so the first
# page of a common filter reads a few hundred rows, not the whole range; the exact sort key of each
# trace it met comes from SEARCH_FIRST_STARTS (trace id index). Attribute filters use the GIN index
# (migrations/0002): `attributes @> ANY(forms)` for each filter, then the exact string-form check.
# $3 service ('' = any), $4 span name ('' = any), $5 jsonb {attribute: string form}, $6 status (NULL
# = any), $7 min duration ns; then `attributes @> ANY($n::jsonb[])` per filter, appended in code.
_SEARCH_FILTERS = """
start_ns >= $1 AND start_ns < $2
  AND ($3 = '' OR service_name = $3)
  AND ($4 = '' OR name = $4)
  AND ($6::smallint IS NULL OR status_code = $6)
  AND end_ns - start_ns >= $7
  AND NOT EXISTS (SELECT 1 FROM jsonb_each_text($5::jsonb) f
                  WHERE (s.attributes ->> f.key) IS DISTINCT FROM f.value)"""
# Matching spans in [$1, $2), newest first, at most $8 (the walk's step).
SEARCH_WALK = "SELECT trace_id, start_ns FROM traces.spans s WHERE {filters} ORDER BY start_ns DESC LIMIT $8"
# The earliest matching start in [$1, $2) of each trace in $8.
SEARCH_FIRST_STARTS = """
SELECT trace_id, min(start_ns) AS first_start FROM traces.spans s
WHERE {filters} AND trace_id = ANY($8::bytea[]) GROUP BY trace_id"""
# The walk's first window and growth: 1 min, 8 min, 64 min, 8.5 h, 68 h, 23 days (≤ 6 windows); ×64
# after a window with no match at all (a rare value: 1 min, 64 min, 68 h, 23 days).
SEARCH_FIRST_WINDOW_NS = 60 * 1_000_000_000
SEARCH_WINDOW_GROWTH = 8
# Summaries of the given traces: root span (no parent; else the earliest), distinct span count,
# worst status (ERROR 2 > OK 1 > UNSET 0).
SUMMARIZE_TRACES = """
SELECT trace_id,
       (array_agg(name ORDER BY parent_span_id IS NOT NULL, start_ns))[1] AS root_name,
       (array_agg(service_name ORDER BY parent_span_id IS NOT NULL, start_ns))[1] AS service_name,
       (array_agg(start_ns ORDER BY parent_span_id IS NOT NULL, start_ns))[1] AS root_start,
       (array_agg(end_ns - start_ns ORDER BY parent_span_id IS NOT NULL, start_ns))[1] AS root_duration,
       count(DISTINCT span_id) AS span_count,
       max(status_code) AS status_code
FROM traces.spans WHERE trace_id = ANY($1::bytea[])
GROUP BY trace_id
"""


def partition_name(day: date) -> str:
    """`spans_pYYYYMMDD` for a UTC day."""
    return f"spans_p{day:%Y%m%d}"


def partition_day(name: str) -> date | None:
    """The day of a partition name, or None when `name` is not one."""
    m = _PARTITION.match(name)
    return datetime.strptime(m.group(1), "%Y%m%d").date() if m else None


def attribute_forms(key: str, value: str) -> list[str]:
    """The JSON documents `{key: stored}` whose stored value can have the string form `value` (what
    `attributes ->> key` returns): the string itself, and the number / boolean / array / object that
    `value` spells as JSON (ingest stores OTLP ints, doubles, bools, arrays and kvlists as such).
    A superset of the matches (e.g. 1.0 contains 1): the exact check follows in SQL."""
    forms = [json.dumps({key: value})]
    try:
        parsed = json.loads(value)
    except ValueError:
        return forms
    if parsed is not None and not isinstance(parsed, str) and not (isinstance(parsed, float) and not math.isfinite(parsed)):
        forms.append(json.dumps({key: parsed}))
    return forms


@dataclass(frozen=True)
class Partition:
    name: str
    day: date
    detach_pending: bool


class Repository:
    """The collector's storage. `pool` connections have search_path `traces` (common.db.create_pool)."""

    name = "postgresql"
    row_encoder = None  # ingest.ROW_FIELDS tuples, as COPY takes them

    def __init__(self, pool: asyncpg.Pool):
        self._pool = pool

    # --- writes ---

    async def copy_spans(self, rows: Sequence[Row]) -> None:
        """COPY `rows` (ingest.ROW_FIELDS order) into `spans`; committed when this returns.

        Raises asyncpg.CheckViolationError (SQLSTATE 23514) when a row has no partition.
        """
        async with self._pool.acquire() as conn:
            await conn.copy_records_to_table("spans", records=rows, columns=SPAN_COLUMNS, schema_name=SCHEMA)

    # --- partitions ---

    async def partitions(self) -> list[Partition]:
        """Attached partitions, oldest first."""
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(LIST_PARTITIONS)
        out = [Partition(r["name"], d, r["detach_pending"]) for r in rows if (d := partition_day(r["name"]))]
        return sorted(out, key=lambda p: p.day)

    async def create_partition(self, day: date) -> None:
        """Create and attach the partition of `day` (no-op when it exists)."""
        name = partition_name(day)
        lo = day_start_ns(datetime(day.year, day.month, day.day))
        async with self._pool.acquire() as conn:
            await conn.execute(SET_LOCK_TIMEOUT)
            try:
                async with conn.transaction():
                    # Replicas starting together create each partition once.
                    await conn.execute(PARTITION_DDL_LOCK)
                    attached = {r["name"] for r in await conn.fetch(LIST_PARTITIONS)}
                    if name in attached:
                        return
                    await conn.execute(CREATE_PARTITION_TABLE.format(name=name))
                    await conn.execute(CREATE_ATTRIBUTE_INDEX.format(name=name))
                    await conn.execute(ATTACH_PARTITION.format(name=name, lo=lo, hi=lo + NS_PER_DAY))
            finally:
                await conn.execute(RESET_LOCK_TIMEOUT)

    async def drop_partition(self, p: Partition) -> tuple[float, float]:
        """Detach `p` without blocking writers (DETACH ... CONCURRENTLY; FINALIZE when an earlier
        attempt was interrupted), drop it, and record its day in `dropped_days`. Returns the seconds
        the detach took (waiting for the transactions that use `spans`: independent of the day's
        size) and the drop (the table is alone by then, nothing waits for it; the filesystem frees its
        files, which grows with the day's size)."""
        async with self._pool.acquire() as conn:
            await conn.execute(SET_LOCK_TIMEOUT)
            try:
                t0 = time.perf_counter()
                stmt = DETACH_FINALIZE if p.detach_pending else DETACH_CONCURRENTLY
                await conn.execute(stmt.format(name=p.name))  # must run outside a transaction block
                t1 = time.perf_counter()
                await self._drop_detached(conn, p.name, p.day)
                return t1 - t0, time.perf_counter() - t1
            finally:
                await conn.execute(RESET_LOCK_TIMEOUT)

    async def retire_partition(self, p: Partition) -> bool:
        """Turn autovacuum off on `p` (the next day to drop), so that no autovacuum holds it when the
        drop comes. False when a lock holder (e.g. that autovacuum) kept it 200 ms: the next pass
        retries (a day is retired a whole day before its drop)."""
        async with self._pool.acquire() as conn:
            await conn.execute(RETIRE_LOCK_TIMEOUT)
            try:
                await conn.execute(RETIRE_PARTITION.format(name=p.name))
                return True
            except asyncpg.LockNotAvailableError:
                return False
            finally:
                await conn.execute(RESET_LOCK_TIMEOUT)

    async def settle_partition(self, p: Partition) -> int:
        """Merge the pending list of `p`'s attribute index (a day that ended); pages merged."""
        async with self._pool.acquire() as conn:
            return await conn.fetchval(CLEAN_PENDING.format(name=p.name))

    async def drop_leftovers(self) -> list[str]:
        """Drop partition tables left detached by an interrupted pass; returns their names."""
        async with self._pool.acquire() as conn:
            names = [r["name"] for r in await conn.fetch(LIST_DETACHED)]
            for name in names:
                day = partition_day(name)
                assert day is not None
                await self._drop_detached(conn, name, day)
        return names

    @staticmethod
    async def _drop_detached(conn: asyncpg.Connection, name: str, day: date) -> None:
        async with conn.transaction():
            await conn.execute(DROP_TABLE.format(name=name))
            await conn.execute(RECORD_DROPPED_DAY, day)

    async def stored_days(self) -> list[date]:
        """Days with an attached partition, oldest first."""
        return [p.day for p in await self.partitions()]

    async def span_count(self) -> int:
        """Stored span rows (retried duplicates included)."""
        async with self._pool.acquire() as conn:
            return await conn.fetchval("SELECT count(*) FROM traces.spans")

    async def day_dropped(self, day: date) -> bool:
        """Whether retention dropped the partition of `day`."""
        async with self._pool.acquire() as conn:
            return bool(await conn.fetchval(DAY_DROPPED, day))

    # --- reads ---

    async def get_trace(self, trace_id: bytes) -> list[asyncpg.Record]:
        """The spans of one trace (one row per span id), ordered by start time then span id."""
        async with self._pool.acquire() as conn:
            return await conn.fetch(GET_TRACE, trace_id)

    async def search_trace_ids(
        self,
        *,
        start_ns: int,
        end_ns: int,
        service_name: str,
        span_name: str,
        attributes: dict[str, str],
        status_code: int | None,
        min_duration_ns: int,
        after: tuple[int, bytes] | None,
        limit: int,
    ) -> list[tuple[bytes, int]]:
        """(trace_id, first_start) of the matching traces, newest first by first_start then trace id,
        strictly after the keyset `after` when given, at most `limit`.

        Exact, not sampled: walking newest first, once every matching span in [frontier, top) is seen,
        every trace whose first matching start is ≥ frontier has been met; those are final. The walk
        stops as soon as `limit` of them are known, or the range is exhausted.

        Statements: one walk per window, and SEARCH_FIRST_STARTS only when it can end the walk. A met
        trace's earliest match is min(earliest span the walk saw, earliest match in [start, frontier)),
        since the walk saw every match in [frontier, top) and any in [top, end) is later still; once
        the walk reaches `start_ns` the first term alone is exact, and while fewer than `limit`
        traces were met the walk cannot stop, so asking is useless. A rare value (a handful of
        traces in 14 days) thus costs the walks only, about one GIN probe per day partition (issue
        17: the two SEARCH_FIRST_STARTS over every partition were most of its 115 ms).
        """
        forms = [attribute_forms(k, v) for k, v in sorted(attributes.items())]
        filters = _SEARCH_FILTERS + "".join(f"\n  AND attributes @> ANY(${9 + i}::jsonb[])" for i in range(len(forms)))
        walk_sql, first_sql = SEARCH_WALK.format(filters=filters), SEARCH_FIRST_STARTS.format(filters=filters)
        args = (service_name, span_name, json.dumps(attributes), status_code, min_duration_ns)
        # Only spans at or before the keyset's start can be the first matching span of a later trace.
        top = min(end_ns, after[0] + 1) if after else end_ns
        step = max(4 * limit, 256)
        met: dict[bytes, int] = {}  # trace -> earliest matching start the walk has seen so far
        exact: dict[bytes, int] = {}  # trace -> earliest matching start in [start_ns, end_ns)
        window = SEARCH_FIRST_WINDOW_NS
        async with self._pool.acquire() as conn:
            while True:
                lo = max(start_ns, top - window)
                rows = await conn.fetch(walk_sql, lo, top, *args, step, *forms)
                if len(rows) == step:
                    frontier = rows[-1]["start_ns"] + 1  # every match in [frontier, top) is in `rows`
                    if rows[0]["start_ns"] == rows[-1]["start_ns"]:
                        step *= 2  # one start time holds a whole step: widen the step, not the window
                        continue
                else:
                    frontier = lo
                    # Nothing at all in this window (a rare value): widen faster.
                    window *= SEARCH_WINDOW_GROWTH if rows else SEARCH_WINDOW_GROWTH ** 2
                for r in rows:  # newest first: the last row of a trace is its earliest here
                    met[bytes(r["trace_id"])] = r["start_ns"]
                done = frontier <= start_ns
                if not done and len(met) < limit:
                    top = frontier
                    continue
                if not done and (todo := [t for t in met if t not in exact]):
                    earlier = {bytes(r["trace_id"]): r["first_start"] for r in await conn.fetch(
                        first_sql, start_ns, frontier, *args, todo, *forms)}
                    exact.update((t, min(met[t], earlier.get(t, met[t]))) for t in todo)
                firsts = {t: exact.get(t, s) for t, s in met.items()}
                final = sorted(((t, s) for t, s in firsts.items()
                                if (done or s >= frontier) and (after is None or (s, t) < after)),
                               key=lambda x: (x[1], x[0]), reverse=True)
                if done or len(final) >= limit:
                    return final[:limit]
                top = frontier

    async def search_traces(self, *, summarize: int, **filters) -> tuple[list[tuple[bytes, int]], dict]:
        """search_trace_ids(**filters), then summarize_traces of its first `summarize` ids."""
        ids = await self.search_trace_ids(**filters)
        return ids, await self.summarize_traces([t for t, _ in ids[:summarize]])

    async def summarize_traces(self, trace_ids: list[bytes]) -> dict[bytes, asyncpg.Record]:
        """Summary rows (root name/service/start/duration, span count, worst status) by trace id."""
        if not trace_ids:
            return {}
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(SUMMARIZE_TRACES, trace_ids)
        return {bytes(r["trace_id"]): r for r in rows}
