"""The ClickHouse span store: the collector's storage on the OpenTelemetry Collector clickhouse
exporter's own tables (`otel_traces`, `otel_traces_trace_id_ts` and its materialized view;
DDL in ./clickhouse_schema, taken from the exporter's source at deploy/'s pinned version).

So our OTLP receiver and an existing collector fleet's exporter write the same rows, and GetTrace,
SearchTraces and the feedback capture read either. Rows are written exactly as the exporter writes
them (exporter_traces.go `pushTraceData`): Timestamp = span start, TraceId/SpanId/ParentSpanId as
lowercase hex ('' for no parent), SpanKind / StatusCode as pdata's `String()` ("Server", "Error"),
Duration = end − start ns, attribute values as `pcommon.Value.AsString()` in Map(String, String)
(encoding and the Arrow insert batch: clickhouse_rows.py).

What the exporter's schema does not keep, and what we do about it (docs/architecture.md "Spans on
ClickHouse"):
- Attribute value types (Map(String, String)): our receiver also writes `AgentFeedbackTypes` (an
  additive column, migration 0007) with the values whose JSON differs from the string, so GetTrace
  returns ints, doubles, bools, arrays and kvlists as our PostgreSQL store does. Rows the exporter
  wrote have '' there: their attributes read back as the exporter's strings (a documented difference).
- SearchTraces attribute filters compare the exporter's string form (`SpanAttributes[k] = v`; int 42
  → "42", true → "true", arrays as compact JSON), where PostgreSQL compares `attributes ->> k`.
- Dropped counts (OTLP dropped_attributes_count of spans, events, links and resources, dropped_events_count,
  dropped_links_count): our receiver keeps them in AgentFeedbackTypes' "d" (clickhouse_rows.DROPPED_KEYS);
  rows the exporter wrote read 0 (its schema drops them).
- Scope attributes: kept by neither store. Scope version: column kept,
  our receiver writes '' (PostgreSQL does not keep it either).
- Duplicates (exporter retries): like PostgreSQL, rows are appended and reads collapse one
  (TraceId, SpanId) to one span (`LIMIT 1 BY SpanId`, `uniqExact(SpanId)`).

GetTrace's read: one statement on our trace table (`otel_traces_by_trace`, migration 0031: each span as
one JSON text, ORDER BY (TraceId, Timestamp), weekly partitions, filled by a materialized view from every
INSERT into otel_traces, the exporter's too), from the first day retention has not dropped. Where that
table does not yet cover the retained spans (`otel_traces_by_trace_since`: rows stored before it existed),
the lookup table's bounds, then the spans from otel_traces.

SearchTraces: one attribute filter alone reads our attribute lookup table (`otel_traces_attrs_weekly`,
filled by a materialized view from every INSERT into otel_traces, the exporter's too; ORDER BY (Key,
Value, Timestamp), values ≤ 256 bytes, weekly partitions), a key range instead of the bloom-filtered
granules of the Map column; other filters, longer values and windows starting before the lookup's
recorded coverage (`otel_traces_attrs_weekly_since`: rows stored before the view existed are only there
after a backfill) scan otel_traces. Same answer, same order and keyset either way. The page's summaries come from our trace
summary table (`otel_traces_summary`, one AggregatingMergeTree row per trace by TraceId, filled by a
materialized view the same way; coverage `otel_traces_summary_since`), traces outside it from
otel_traces (the lookup table's bounds, then SUMMARIZE). A common value's page is taken from the
window's last hour when every trace on it started there (search_traces).

Retention: the table TTL (`retention_days`, 14 by default; whole parts dropped, `ttl_only_drop_parts`)
over daily partitions (the trace-id lookup's and the summaries' too; the attribute lookup's are weekly),
plus a pass (retention.TtlRetention) that drops whole past days of otel_traces, the trace-id lookup and
the summaries at once with the same rule as PostgreSQL (`ingest.first_retained_day_ns`), records them
for TRACE_EXPIRED, drops the attribute lookup's weeks once their last day is past, and does so on a
simulated clock in tests. Searches never see the days in between: query.TraceReader clamps their
window to the retained one.

Sharded (`cluster` set): the local tables are `<table>_local` (ReplicatedMergeTree ON CLUSTER), reads
and writes go to Distributed tables named as the exporter's (`<table>`), sharded by TraceId.
"""
from __future__ import annotations

import calendar
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from string import Template

import orjson

from services.tracecollector.clickhouse_rows import (
    ARROW_FORMAT,
    COLUMNS,
    KIND_NAMES,
    STATUS_NAMES,
    ExporterRowEncoder,
    arrow_payload,
    warm_up,
)
from services.tracecollector.clickhouse_transport import ClickHouseTransport

SCHEMA_DIR = Path(__file__).parent / "clickhouse_schema"
_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"

# pdata String() names (clickhouse_rows.KIND_NAMES / STATUS_NAMES, what the exporter writes) back to
# OTLP enums (older exporters wrote the proto names "SPAN_KIND_SERVER" / "STATUS_CODE_ERROR"; both read back).
_KIND_CODES = {n: i for i, n in enumerate(KIND_NAMES)} | {
    f"SPAN_KIND_{n.upper()}": i for i, n in enumerate(KIND_NAMES)}
_STATUS_CODES = {n: i for i, n in enumerate(STATUS_NAMES)} | {
    f"STATUS_CODE_{n.upper()}": i for i, n in enumerate(STATUS_NAMES)}
_STATUS_SQL = ("multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 2,"
               " StatusCode IN ('Ok', 'STATUS_CODE_OK'), 1, 0)")


# --- reads -----------------------------------------------------------------------------------

_SPAN_COLUMNS = """TraceId, SpanId, ParentSpanId, toUnixTimestamp64Nano(Timestamp) AS start_ns, Duration, SpanName,
SpanKind, StatusCode, StatusMessage, ServiceName, ScopeName, TraceState, SpanAttributes, ResourceAttributes,
arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), Events.Name, Events.Attributes,
Links.TraceId, Links.SpanId, Links.TraceState, Links.Attributes, AgentFeedbackTypes"""
# GetTrace and the summaries read the exporter's lookup table first, as its README's trace query does:
# the traces' first and last span start (seconds; End + 1 s, Start/End are DateTime). Those bounds go
# to the span query as constants, so ClickHouse prunes partitions (toDate(Timestamp)) and primary key
# ranges (toDateTime(Timestamp)) before the TraceId bloom filter picks granules (EXPLAIN indexes=1:
# 1 part of 14). A separate statement, not a scalar subquery in WITH: the subquery form cost twice the
# CPU per call in chdb (bench_span_stores).
BOUNDS = """
SELECT count(), toUnixTimestamp(min(Start)), toUnixTimestamp(max(End)) + 1 FROM {ts}
WHERE TraceId IN {{ids:Array(String)}}"""
# GetTrace from the trace table (migration 0031): one statement, the spans' JSON texts (GET_TRACE's columns
# but TraceId) from the first day retention has not dropped; order and one span per id applied in Python.
GET_TRACE_ONE = """
SELECT Span FROM {t}
WHERE TraceId = {{tid:String}} AND Timestamp >= fromUnixTimestamp64Nano({{kept:Int64}})"""
# GetTrace's statements read one trace's few granules: one thread, as ClickHouse's default thread pool
# per statement costs more to set up (~10 ms CPU at 3M spans) than it saves; no PREWHERE, whose first
# pass over the filter columns is a second read of the same granule (fewer files opened) (issue 26).
GET_TRACE_SETTINGS = {"max_threads": 1, "optimize_move_to_prewhere": 0}
GET_TRACE = """
SELECT {cols} FROM {t}
WHERE TraceId = {{tid:String}} AND Timestamp >= toDateTime64({{lo:UInt32}}, 9) AND Timestamp < toDateTime64({{hi:UInt32}}, 9)
ORDER BY start_ns, SpanId
LIMIT 1 BY SpanId"""
# Summaries: root span = no parent, else the earliest (as PostgreSQL's SUMMARIZE_TRACES).
SUMMARIZE = """
SELECT TraceId,
       argMin(SpanName, (ParentSpanId != '', Timestamp)),
       argMin(ServiceName, (ParentSpanId != '', Timestamp)),
       toUnixTimestamp64Nano(min((ParentSpanId != '', Timestamp)).2),
       argMin(Duration, (ParentSpanId != '', Timestamp)),
       uniqExact(SpanId),
       max({status})
FROM {t}
WHERE TraceId IN {{ids:Array(String)}}
  AND Timestamp >= toDateTime64({{lo:UInt32}}, 9) AND Timestamp < toDateTime64({{hi:UInt32}}, 9)
GROUP BY TraceId"""
# The page's summaries from our per-trace table (migration 0020), one statement by primary key; rows
# of one trace not yet merged are combined here (the table's own merge functions). Columns as SUMMARIZE's,
# then the trace's earliest span start (0029; 0 in rows summarized before it).
SUMMARY = """
SELECT TraceId, (min(Root) AS r).3, r.4, toUnixTimestamp64Nano(r.2), r.5, length(groupUniqArrayArray(SpanIds)),
       max(Status), toUnixTimestamp64Nano(min(Start))
FROM {t}
WHERE TraceId IN {{ids:Array(String)}}
GROUP BY TraceId"""
# A trace matches when one of its spans in [lo, hi) passes every filter; sorted by its earliest
# matching start, newest first, then trace id. Filters are appended in code (none = no condition,
# so the primary key (ServiceName, SpanName, time) and the skip indexes apply to what is given).
SEARCH = """
SELECT TraceId, toUnixTimestamp64Nano(min(Timestamp)) AS first_start
FROM {t}
WHERE Timestamp >= fromUnixTimestamp64Nano({{lo:Int64}}) AND Timestamp < fromUnixTimestamp64Nano({{hi:Int64}}){filters}
GROUP BY TraceId{having}
ORDER BY first_start DESC, TraceId DESC
LIMIT {{limit:UInt32}}"""
_AFTER = "\nHAVING first_start < {after_s:Int64} OR (first_start = {after_s:Int64} AND TraceId < {after_t:String})"
# One attribute filter and nothing else: SEARCH over the attribute lookup table (migration 0015: one row
# per span attribute, (Key, Value, Timestamp) its primary key), the same answer read from a key range.
_ATTR_FILTER = "\n  AND Key = {k0:String} AND Value = {v0:String}"
ATTR_VALUE_MAX_BYTES = 256  # longer values are not in the lookup table (0016's WHERE)
# The lookup's coverage (migration 0017) is re-read this often, so a backfill is seen without a restart.
_SINCE_TTL_S = 60.0
# A value whose newest page lies within this much of the window's end is first looked up there only
# (ClickHouseStore.search_traces); `_DENSE_MAX` bounds the values remembered.
_RECENT_NS = 3600 * 1_000_000_000
_DENSE_MAX = 4096
# When the lookup is made on a table already holding spans: its coverage starts this far past now and
# past every stored span, so spans in INSERTs that began before the view existed are never relied on.
_SINCE_MARGIN_NS = 3600 * 1_000_000_000


@dataclass(frozen=True)
class SpanRecord:
    """A stored span in the store-neutral shape query.span_proto reads (attributes already decoded)."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    start_ns: int
    end_ns: int
    name: str
    kind: int
    status_code: int
    status_message: str
    service_name: str
    scope_name: str
    trace_state: str
    attributes: dict
    resource_attributes: dict
    events: list
    links: list
    dropped_attributes_count: int = 0
    dropped_events_count: int = 0
    dropped_links_count: int = 0
    resource_dropped_attributes_count: int = 0
    # Characters of the JSON text the span was read from (trace_budget.stored_chars: GetTrace's cheap size
    # test); a measure of the read, not of the span: left out of equality.
    stored_chars: int = field(default=0, compare=False)

    def __getitem__(self, key: str):
        return getattr(self, key)


def _overlay(strings: dict, typed: dict | None) -> dict:
    return {**strings, **typed} if typed else dict(strings)


def span_record(r: tuple, stored_chars: int | None = None) -> SpanRecord:
    """A GET_TRACE row as a SpanRecord (types from AgentFeedbackTypes where our receiver wrote them);
    `stored_chars`: the length of the JSON text the row was decoded from (None: measured here, as the
    row's compact JSON)."""
    (tid, sid, pid, start, duration, name, kind, status, message, service, scope, trace_state, attrs, res,
     ev_ts, ev_names, ev_attrs, ln_tids, ln_sids, ln_states, ln_attrs, types_json) = r
    types = orjson.loads(types_json) if types_json else {}
    ev_typed, ln_typed = types.get("e", {}), types.get("l", {})
    dropped = types.get("d", {})  # clickhouse_rows.DROPPED_KEYS
    ev_dropped, ln_dropped = dropped.get("ea", {}), dropped.get("la", {})
    return SpanRecord(
        trace_id=bytes.fromhex(tid), span_id=bytes.fromhex(sid), parent_span_id=bytes.fromhex(pid) if pid else None,
        start_ns=int(start), end_ns=int(start) + int(duration), name=name, kind=_KIND_CODES.get(kind, 0),
        status_code=_STATUS_CODES.get(status, 0), status_message=message, service_name=service,
        scope_name=scope, trace_state=trace_state,
        attributes=_overlay(attrs, types.get("s")), resource_attributes=_overlay(res, types.get("r")),
        events=[{"time_unix_nano": int(t), "name": n, "attributes": _overlay(a, ev_typed.get(str(i))),
                 "dropped_attributes_count": ev_dropped.get(str(i), 0)}
                for i, (t, n, a) in enumerate(zip(ev_ts, ev_names, ev_attrs, strict=True))],
        links=[{"trace_id": lt, "span_id": ls, "trace_state": st, "attributes": _overlay(a, ln_typed.get(str(i))),
                "dropped_attributes_count": ln_dropped.get(str(i), 0)}
               for i, (lt, ls, st, a) in enumerate(zip(ln_tids, ln_sids, ln_states, ln_attrs, strict=True))],
        dropped_attributes_count=dropped.get("a", 0), dropped_events_count=dropped.get("ev", 0),
        dropped_links_count=dropped.get("ln", 0), resource_dropped_attributes_count=dropped.get("r", 0),
        stored_chars=len(orjson.dumps(r)) if stored_chars is None else stored_chars,
    )


def _summary(r: tuple) -> dict:
    """A SUMMARY or SUMMARIZE row as summarize_traces' mapping."""
    return {"root_name": r[1], "service_name": r[2], "root_start": int(r[3]), "root_duration": int(r[4]),
            "span_count": int(r[5]), "status_code": int(r[6])}


@dataclass(frozen=True)
class Tables:
    """Where the store reads and writes (`db.name`), and where partitions live (the local tables)."""

    database: str
    traces: str  # the exporter's table name (a Distributed table when sharded)
    cluster: str = ""  # ON CLUSTER name; '' = one server

    @property
    def local(self) -> str:
        return f"{self.traces}_local" if self.cluster else self.traces

    def q(self, name: str) -> str:
        return f"`{self.database}`.`{name}`"


def schema_statements(t: Tables, retention_days: int, engine: str = "") -> list[str]:
    """The DDL of ./clickhouse_schema rendered for `t` (*distributed.sql only when sharded), in file order."""
    on_cluster = f"ON CLUSTER `{t.cluster}`" if t.cluster else ""
    engine = engine or ("ReplicatedMergeTree()" if t.cluster else "MergeTree()")
    names = dict(db=f"`{t.database}`", table=t.local, dist=t.traces, on_cluster=on_cluster, engine=engine,
                 agg_engine=engine.replace("MergeTree(", "AggregatingMergeTree("),
                 ttl_days=str(int(retention_days)), ttl_days_plus_1=str(int(retention_days) + 1),
                 cluster=f"'{t.cluster}'")
    out = []
    for path in sorted(SCHEMA_DIR.glob("*.sql")):
        if "distributed" in path.name and not t.cluster:
            continue
        text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))
        out += [s.strip() for s in Template(text).substitute(names).split(";") if s.strip()]
    return out


class ClickHouseStore:
    """The collector's storage on the exporter's ClickHouse tables (see the module docstring)."""

    name = "clickhouse"
    row_encoder = ExporterRowEncoder()

    def __init__(self, transport: ClickHouseTransport, tables: Tables):
        warm_up()  # at start, not in the first Export's INSERT
        self._tx = transport
        self._t = tables
        self._traces = tables.q(tables.traces)
        self._ts = tables.q(f"{tables.traces}_trace_id_ts")
        self._days = tables.q(f"{tables.traces}_dropped_days")
        self._attrs = tables.q(f"{tables.traces}_attrs_weekly")
        self._attrs_since = tables.q(f"{tables.traces}_attrs_weekly_since")
        self._summary = tables.q(f"{tables.traces}_summary")
        self._summary_since = tables.q(f"{tables.traces}_summary_since")
        self._by_trace = tables.q(f"{tables.traces}_by_trace")
        self._by_trace_since = tables.q(f"{tables.traces}_by_trace_since")
        # (read at, monotonic s; the first span start, ns, that retention has not dropped: the day after
        # the last recorded in dropped_days, 0 when none).
        self._kept: tuple[float, int] = (-_SINCE_TTL_S, 0)
        # Lookup (attrs / summary) → (read at, monotonic s; its coverage start in ns or None).
        self._since: dict[str, tuple[float, int | None]] = {}
        # (key, value) → whether its last page lay within _RECENT_NS of the window's end (a hint only).
        self._dense: dict[tuple[str, str], bool] = {}
        self._bounds = BOUNDS.format(ts=self._ts)
        self._get_trace = GET_TRACE.format(cols=_SPAN_COLUMNS, t=self._traces)
        self._get_trace_one = GET_TRACE_ONE.format(t=self._by_trace)
        self._summarize = SUMMARIZE.format(t=self._traces, status=_STATUS_SQL)
        self._summary_sql = SUMMARY.format(t=self._summary)

    async def create_schema(self, retention_days: int) -> None:
        """CREATE ... IF NOT EXISTS the exporter's tables and ours (idempotent: tables an exporter
        already created are kept, our column is added to them, their TTL set to `retention_days`)."""
        on_cluster = f" ON CLUSTER `{self._t.cluster}`" if self._t.cluster else ""
        await self._tx.command(f"CREATE DATABASE IF NOT EXISTS `{self._t.database}`{on_cluster}")
        for stmt in schema_statements(self._t, retention_days):
            await self._tx.command(stmt)
        # Tables made earlier (another retention_days, or the exporter's `ttl`): the TTL follows the
        # setting; existing parts are not rewritten (they expire whole, by partition, as before).
        for table, column, days in ((self._t.local, "Timestamp", 0), (f"{self._t.local}_trace_id_ts", "Start", 0),
                                    (f"{self._t.local}_attrs_weekly", "Timestamp", 0), (f"{self._t.local}_summary", "Day", 1),
                                    (f"{self._t.local}_by_trace", "Timestamp", 0)):
            await self._tx.command(
                f"ALTER TABLE {self._t.q(table)}{on_cluster} MODIFY TTL toDateTime({column}) + "
                f"toIntervalDay({int(retention_days) + days}) SETTINGS materialize_ttl_after_modify = 0")
        # The projection 0010 made on deployments before 0031 (replaced by its trace table; nothing else
        # read it), dropped only where it exists: DROP PROJECTION IF EXISTS is a mutation of every part
        # even without one.
        ((projections,),) = await self._tx.query(
            "SELECT count() FROM system.projections WHERE database = {db:String} AND table = {t:String}"
            " AND name = 'agentfeedback_by_trace'", {"db": self._t.database, "t": self._t.local})
        if int(projections):
            await self._tx.command(f"ALTER TABLE {self._t.q(self._t.local)}{on_cluster}"
                                   " DROP PROJECTION IF EXISTS agentfeedback_by_trace")
        for since_table in (self._attrs_since, self._summary_since, self._by_trace_since):
            await self._record_since(since_table)

    async def _record_since(self, since_table: str) -> None:
        """Record, once, in `since_table` from which span start a lookup filled by a view (attributes,
        summaries) is complete: 0 when otel_traces is empty (every span goes through the view), else past
        every stored span and now by _SINCE_MARGIN_NS (earlier spans are read from otel_traces until a
        backfill lowers it)."""
        if int((await self._tx.query(f"SELECT count() FROM {since_table}"))[0][0]):
            return
        ((n, newest),) = await self._tx.query(
            f"SELECT count(), toUnixTimestamp64Nano(max(Timestamp)) FROM {self._traces}")
        since = max(int(newest), time.time_ns()) + _SINCE_MARGIN_NS if int(n) else 0
        await self._tx.command(f"INSERT INTO {since_table} (Since) VALUES (fromUnixTimestamp64Nano({{s:Int64}}))",
                               {"s": since})

    async def _complete_since(self, lookup: str) -> int | None:
        """The coverage start (ns) of the `lookup` table ("attrs_weekly", "summary", "by_trace"), None when not recorded or
        its tables are absent (tables an exporter created, `clickhouse_create_schema` off); cached for
        _SINCE_TTL_S."""
        at, value = self._since.get(lookup, (-_SINCE_TTL_S, None))
        if time.monotonic() - at >= _SINCE_TTL_S:
            value = None
            table = f"{self._t.traces}_{lookup}"
            ((tables,),) = await self._tx.query(
                "SELECT count() FROM system.tables WHERE database = {db:String} AND name IN {names:Array(String)}",
                {"db": self._t.database, "names": [table, f"{table}_since"]})
            if int(tables) == 2:
                ((n, since),) = await self._tx.query(
                    f"SELECT count(), toUnixTimestamp64Nano(min(Since)) FROM {self._t.q(table + '_since')}")
                value = int(since) if int(n) else None
            self._since[lookup] = (time.monotonic(), value)
        return value

    async def close(self) -> None:
        await self._tx.close()

    async def ping(self) -> None:
        """Returns when ClickHouse answers `SELECT 1`; raises ClickHouseError otherwise."""
        await self._tx.ping()

    # --- writes ---

    async def copy_spans(self, rows: Sequence[tuple]) -> None:
        """INSERT `rows` (ExporterRowEncoder tuples) into the exporter's columns and ours, one statement
        with one Arrow record batch (clickhouse_rows.arrow_payload); stored when this returns. Raises
        ClickHouseError."""
        await self._tx.insert(self._traces, COLUMNS, arrow_payload(rows), fmt=ARROW_FORMAT)

    # --- reads ---

    async def get_trace(self, trace_id: bytes) -> list[SpanRecord]:
        """The spans of one trace (one per span id), ordered by start time then span id.

        From the trace table (one statement) when it covers every span retention has kept; else from
        otel_traces (the lookup table's bounds, then the spans)."""
        tid = trace_id.hex()
        kept = await self._kept_from()
        if (since := await self._complete_since("by_trace")) is not None and since <= kept:
            rows = await self._tx.query(self._get_trace_one, {"tid": tid, "kept": kept}, settings=GET_TRACE_SETTINGS)
            # Each span with the length of its JSON text last (the answer's cheap size test, trace_budget.py).
            spans = sorted(((tid, *orjson.loads(span), len(span)) for (span,) in rows), key=lambda r: (int(r[3]), r[1]))
            seen: set[str] = set()
            return [span_record(r[:-1], r[-1]) for r in spans if r[1] not in seen and not seen.add(r[1])]
        bounds = await self._time_bounds([tid], GET_TRACE_SETTINGS)
        if bounds is None:
            return []
        rows = await self._tx.query(self._get_trace, {"tid": tid, **bounds}, settings=GET_TRACE_SETTINGS)
        return [span_record(r) for r in rows]

    async def _kept_from(self) -> int:
        """The first span start (ns) retention has not dropped: the UTC day after the last one recorded in
        dropped_days, 0 when none. Cached for _SINCE_TTL_S (this store's own drop_day updates it at once;
        another collector's is seen within that time)."""
        at, kept = self._kept
        if time.monotonic() - at >= _SINCE_TTL_S:
            ((n, last),) = await self._tx.query(f"SELECT count(), toUnixTimestamp(max(Day)) FROM {self._days}")
            kept = (int(last) + 86_400) * 1_000_000_000 if int(n) else 0
            self._kept = (time.monotonic(), kept)
        return kept

    async def _time_bounds(self, trace_ids: list[str], settings: Mapping[str, int] | None = None) -> dict[str, int] | None:
        """{"lo", "hi"}: seconds bounding every span start of `trace_ids` (hex), from the lookup table
        (a statement with the query `settings`); None when it has none of them."""
        ((n, lo, hi),) = await self._tx.query(self._bounds, {"ids": trace_ids}, settings=settings)
        return {"lo": int(lo), "hi": int(hi)} if int(n) else None

    async def search_trace_ids(
        self, *, start_ns: int, end_ns: int, service_name: str, span_name: str, attributes: dict[str, str],
        status_code: int | None, min_duration_ns: int, after: tuple[int, bytes] | None, limit: int,
    ) -> list[tuple[bytes, int]]:
        """(trace_id, first matching start) newest first, strictly after the keyset `after`, at most
        `limit` (the meaning of repository.Repository.search_trace_ids).

        One attribute filter alone (value ≤ ATTR_VALUE_MAX_BYTES, window within the lookup's coverage)
        reads the attribute lookup table; anything else scans otel_traces (sort key, skip indexes)."""
        params: dict = {"lo": start_ns, "hi": end_ns, "limit": limit}
        having = ""
        if after is not None:
            having = _AFTER
            params["after_s"], params["after_t"] = after[0], after[1].hex()
        if (attr := await self._lookup_attr(start_ns, service_name, span_name, attributes, status_code,
                                            min_duration_ns)) is not None:
            params["k0"], params["v0"] = attr
            sql = SEARCH.format(t=self._attrs, filters=_ATTR_FILTER, having=having)
            return [(bytes.fromhex(t), int(s)) for t, s in await self._tx.query(sql, params)]
        filters = []
        if service_name:
            filters.append("ServiceName = {svc:String}")
            params["svc"] = service_name
        if span_name:
            filters.append("SpanName = {name:String}")
            params["name"] = span_name
        if status_code is not None:
            filters.append("StatusCode IN {status:Array(String)}")
            params["status"] = [STATUS_NAMES[status_code], f"STATUS_CODE_{STATUS_NAMES[status_code].upper()}"]
        if min_duration_ns:
            filters.append("Duration >= {min_duration:UInt64}")
            params["min_duration"] = min_duration_ns
        for i, (k, v) in enumerate(sorted(attributes.items())):
            # has(mapValues) lets idx_span_attr_value (bloom filter) skip granules without the value; the
            # key's filter (mapContains, idx_span_attr_key) only where '' must not match a missing key:
            # keys are common, and with it a rare value's search took twice as long (bench_span_stores).
            cond = f"has(mapValues(SpanAttributes), {{v{i}:String}}) AND SpanAttributes[{{k{i}:String}}] = {{v{i}:String}}"
            filters.append(cond if v else f"mapContains(SpanAttributes, {{k{i}:String}}) AND {cond}")
            params[f"k{i}"], params[f"v{i}"] = k, v
        sql = SEARCH.format(t=self._traces, filters="".join(f"\n  AND {f}" for f in filters), having=having)
        return [(bytes.fromhex(t), int(s)) for t, s in await self._tx.query(sql, params)]

    async def _lookup_attr(self, start_ns: int, service_name: str, span_name: str, attributes: dict[str, str],
                           status_code: int | None, min_duration_ns: int) -> tuple[str, str] | None:
        """(key, value) when the search reads the attribute lookup table: one attribute filter and no
        other, its value ≤ ATTR_VALUE_MAX_BYTES, the window starting within the lookup's coverage."""
        if (len(attributes) == 1 and not (service_name or span_name or min_duration_ns) and status_code is None
                and len((v := next(iter(attributes.values()))).encode()) <= ATTR_VALUE_MAX_BYTES
                and (since := await self._complete_since("attrs_weekly")) is not None and start_ns >= since):
            return next(iter(attributes)), v
        return None

    async def search_traces(self, *, summarize: int, **filters) -> tuple[list[tuple[bytes, int]], dict[bytes, dict]]:
        """search_trace_ids(**filters) and summarize_traces of its first `summarize` ids.

        A common attribute value (its last full page lay within _RECENT_NS of the window's end: the
        `_dense` hint) is first looked up from `cut` = that end − _RECENT_NS only, and the page summarized
        with each trace's earliest span start (the summary's Start, migration 0029). When `limit` traces
        match there and every trace on the page started at or after `cut`, the page is the whole
        window's: those traces have no matching span before `cut`, so their first matching start is the
        one found; every trace not found there first matches before `cut`, after the page in its order;
        and a trace found there that started earlier sorts at or after where it was found. Needs the
        window to start within the summaries' coverage (Start then counts every span in it). Otherwise
        (or when the hint is off) the whole window, as search_trace_ids then summarize_traces. Both ways
        are 2 statements; a failed try costs 2 more and turns the hint off."""
        lo, hi, after, limit = filters["start_ns"], filters["end_ns"], filters["after"], filters["limit"]
        attr = await self._lookup_attr(lo, filters["service_name"], filters["span_name"], filters["attributes"],
                                       filters["status_code"], filters["min_duration_ns"])
        end = hi if after is None else min(hi, after[0] + 1)  # past the keyset, nothing is on the page
        cut, learn = end - _RECENT_NS, attr is not None
        if (attr is not None and self._dense.get(attr) and cut > lo
                and (since := await self._complete_since("summary")) is not None and lo >= since):
            recent = await self.search_trace_ids(**{**filters, "start_ns": cut})
            if len(recent) == limit:
                page = recent[:summarize]
                rows = await self._tx.query(self._summary_sql, {"ids": [t.hex() for t, _ in page]})
                started = {bytes.fromhex(r[0]): r for r in rows if int(r[7]) >= cut}
                if all(t in started for t, _ in page):
                    return recent, {t: _summary(started[t]) for t, _ in page}
                self._dense[attr], learn = False, False  # its pages hold traces that started earlier
        ids = await self.search_trace_ids(**filters)
        if learn and len(ids) == limit:  # a short last page says nothing of the value
            if len(self._dense) >= _DENSE_MAX:
                self._dense.clear()
            self._dense[attr] = ids[-1][1] >= cut
        return ids, await self.summarize_traces([t for t, _ in ids[:summarize]])

    async def summarize_traces(self, trace_ids: list[bytes]) -> dict[bytes, dict]:
        """Summary rows (root name/service/start/duration, span count, worst status) by trace id.

        From the trace summary table (one statement) for traces whose root starts within its coverage;
        the others (stored before it existed, or tables an exporter created without it) from otel_traces
        (the lookup table's bounds, then SUMMARIZE)."""
        if not trace_ids:
            return {}
        ids = [t.hex() for t in trace_ids]
        rows: list[tuple] = []
        if (since := await self._complete_since("summary")) is not None:
            rows = [r for r in await self._tx.query(self._summary_sql, {"ids": ids}) if int(r[3]) >= since]
            ids = sorted(set(ids) - {r[0] for r in rows})
        if ids and (bounds := await self._time_bounds(ids)) is not None:
            rows += await self._tx.query(self._summarize, {"ids": ids, **bounds})
        return {bytes.fromhex(r[0]): _summary(r) for r in rows}

    # --- retention ---

    async def stored_days(self) -> list[date]:
        """UTC days that have span data (active parts of the local table), oldest first."""
        rows = await self._tx.query(
            "SELECT DISTINCT partition FROM system.parts WHERE database = {db:String} AND table = {t:String}"
            " AND active ORDER BY partition", {"db": self._t.database, "t": self._t.local})
        return [date.fromisoformat(r[0].strip("'")) for r in rows]

    async def drop_day(self, day: date) -> None:
        """Drop the partitions of `day` from the span table, the trace-id lookup and the trace summaries
        at once (a metadata operation whatever the day's size), and record the day."""
        on_cluster = f" ON CLUSTER `{self._t.cluster}`" if self._t.cluster else ""
        for table in (self._t.local, f"{self._t.local}_trace_id_ts", f"{self._t.local}_summary"):
            await self._tx.command(f"ALTER TABLE {self._t.q(table)}{on_cluster} DROP PARTITION '{day.isoformat()}'")
        await self._tx.command(f"INSERT INTO {self._days} (Day) VALUES ('{day.isoformat()}')")
        after = (calendar.timegm(day.timetuple()) + 86_400) * 1_000_000_000
        self._kept = (time.monotonic(), max(self._kept[1], after))

    async def drop_weeks_before(self, first: date) -> list[date]:
        """Drop the weekly partitions (UTC weeks from Monday) of the attribute lookup and the trace table
        whose last day is before `first` (the first retained day); their Mondays, oldest first. A metadata
        operation per week."""
        on_cluster = f" ON CLUSTER `{self._t.cluster}`" if self._t.cluster else ""
        dropped: set[date] = set()
        for local in (f"{self._t.local}_attrs_weekly", f"{self._t.local}_by_trace"):
            rows = await self._tx.query(
                "SELECT DISTINCT partition FROM system.parts WHERE database = {db:String} AND table = {t:String}"
                " AND active ORDER BY partition", {"db": self._t.database, "t": local})
            weeks = [m for (p,) in rows if (m := date.fromisoformat(p.strip("'"))) + timedelta(days=7) <= first]
            for monday in weeks:
                await self._tx.command(
                    f"ALTER TABLE {self._t.q(local)}{on_cluster} DROP PARTITION '{monday.isoformat()}'")
            dropped.update(weeks)
        return sorted(dropped)

    async def day_dropped(self, day: date) -> bool:
        """Whether a retention pass dropped the spans of `day`."""
        rows = await self._tx.query(f"SELECT count() FROM {self._days} WHERE Day = {{d:Date}}", {"d": day.isoformat()})
        return bool(rows and int(rows[0][0]))

    async def span_count(self) -> int:
        """Stored rows (duplicates included)."""
        return int((await self._tx.query(f"SELECT count() FROM {self._traces}"))[0][0])

    async def bytes_on_disk(self) -> int:
        """Compressed bytes of the span table's active parts (lookup table excluded)."""
        rows = await self._tx.query(
            "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = {db:String} AND table = {t:String} AND active",
            {"db": self._t.database, "t": self._t.local})
        return int(rows[0][0] or 0)


__all__ = ["ClickHouseStore", "SpanRecord", "Tables", "schema_statements"]
