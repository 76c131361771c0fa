"""Both span stores, same payloads, same run (`python -m tests.bench.run span_stores`; issue 26).

For each store (`pg` = PostgreSQL, the embedded default; `ch` = ClickHouse on the OpenTelemetry
exporter's schema, here through chdb, the in-process engine standing in for a ClickHouse server: no
HTTP hop, and the engine shares this process's CPU with the collector, so its figures are indicative):
- `span_store_{pg,ch}_ingest_spans_per_s`: OTLP/gRPC Exports of 1000 spans (bench_collector.make_payload),
  4 concurrent clients, each acknowledged after its spans were stored, to a collector in this process.
- On BENCH_SPAN_STORES_SPANS spans (default 3_000_000, issue 26's size: 1000-span payloads spread over
  14 UTC days, encoded as each store's ingest encodes them and written through its write path; made as
  loaded, so memory stays flat): `_get_trace_p99_ms` (+ p50; 1000 GetTrace calls through
  query.TraceReader; fewer calls report `_get_trace_max_ms`, tests/bench/stats.py), `_search_14d_rare_p50_ms` (one attribute value on 1 span in 7 payloads, whole
  window), `_search_1d_common_p50_ms` (`gen_ai.tool.name=search`, on every trace, last day), first page
  of 50, after each store's background maintenance (PostgreSQL ANALYZE; ClickHouse OPTIMIZE ... FINAL,
  the merges a server does within minutes); `_bytes_per_span` (PostgreSQL: spans partitions with their
  indexes; ClickHouse: otel_traces, its trace-id and attribute
  lookup tables, the trace summaries and the trace table after merges, skip indexes included).
- `span_store_ch_select1_p50_ms`, `_p99_ms`: the floor under every ClickHouse figure, `SELECT 1` through
  the same transport (GET_TRACE_CALLS calls, on the loaded 14-day set): chdb's fixed cost per statement
  in this process, which GetTrace pays once (one statement on the trace table, migration 0031).
- `span_store_ch_vs_pg_ingest`, `_bytes`: ratios (issue 26's targets: ingest ≥ 2, bytes ≤ 0.3; GetTrace
  p99 ≤ 10 ms and both searches ≤ 50 ms p50 on ClickHouse).

BENCH_SPAN_STORES_EXPORTS (default 20) sets the ingest size. Figures are printed side by side: each
ClickHouse figure right after its PostgreSQL counterpart. A reduced run: BENCH_SPAN_STORES_SPANS=56000.
"""
from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Iterator

from agentfeedback.traces.v1 import traces_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from services.common.db import close_pool, create_pool, migrate
from services.tracecollector.clickhouse import ClickHouseStore, Tables
from services.tracecollector.clickhouse_transport import ChdbTransport
from services.tracecollector.ingest import NS_PER_DAY, Window, first_retained_day_ns, flatten
from services.tracecollector.query import TraceReader
from services.tracecollector.repository import Repository
from services.tracecollector.retention import Retention
from services.tracecollector.server import MIGRATIONS, SCHEMA, create_server
from services.tracecollector.settings import CollectorSettings
from tests.bench.bench_collector import SECRET, make_payload, send_all
from tests.bench.stats import tail
from tests.helpers.otlp import kv

NS = 1_000_000_000
EXPORTS = int(os.environ.get("BENCH_SPAN_STORES_EXPORTS", "20"))
SPANS = int(os.environ.get("BENCH_SPAN_STORES_SPANS", "3000000"))  # issue 26: GetTrace over 3M spans
GET_TRACE_CALLS = 1000
SEARCH_REPS = 11
RARE_EVERY = 7  # one payload in 7 carries the rare value (on one span)
# The ClickHouse store's tables that grow with spans (merged before the reads, counted in bytes per span).
CH_TABLES = ("otel_traces", "otel_traces_trace_id_ts", "otel_traces_attrs_weekly", "otel_traces_summary",
             "otel_traces_by_trace")
SMOKE = {"EXPORTS": 2, "SPANS": 14_000, "GET_TRACE_CALLS": 10, "SEARCH_REPS": 2}


def _ts(ns: int) -> Timestamp:
    return Timestamp(seconds=ns // NS, nanos=ns % NS)


def dataset(now_ns: int, encoder) -> Iterator[tuple[list, list[bytes]]]:
    """(storage rows of one payload, made by `encoder` as the store's write path makes them, its trace
    ids) per payload, spread over the 14 retained UTC days up to `now_ns` (from the first retained
    midnight: 14 × 24 h before `now_ns` lies on a day retention has dropped, with no partition). Made as
    consumed (3M spans are not held)."""
    payloads = max(SPANS // 1000, 14)
    window = Window(0, 2**62)
    first = first_retained_day_ns(now_ns, 14) + 600 * NS
    for j in range(payloads):
        # Payload j's spans sit 100..600 s before its own "now", spread evenly over the retained days.
        at = first + (j + 1) * (now_ns - first) // (payloads + 1)
        req = trace_service_pb2.ExportTraceServiceRequest.FromString(make_payload(10_000 + j, at))
        spans = req.resource_spans[0].scope_spans[0].spans
        if j % RARE_EVERY == 0:
            spans[0].attributes.append(kv("bench.case", "needle"))
        yield flatten(req, window, encoder).rows, sorted({bytes(s.trace_id) for s in spans})


async def _latencies(fn, reps: int) -> list[float]:
    await fn(0)  # warm-up
    lat = []
    for i in range(reps):
        t = time.perf_counter()
        await fn(i)
        lat.append((time.perf_counter() - t) * 1000)
    return sorted(lat)


async def query_figures(prefix: str, store, now_ns: int, settle) -> dict[str, float]:
    """Load the dataset through the store's write path (rows encoded as its ingest encodes them), `await
    settle()` (what each store's background maintenance does in steady state: PostgreSQL's ANALYZE,
    ClickHouse's merges), then time the reads."""
    load_s, spans, trace_ids = 0.0, 0, []
    for rows, ids in dataset(now_ns, store.row_encoder):
        t0 = time.perf_counter()
        await store.copy_spans(rows)
        load_s += time.perf_counter() - t0
        spans += len(rows)
        trace_ids += ids
    await settle()
    reader = TraceReader(store, lambda: Window.at(now_ns, 14, 3600), max_search_days=14)
    rnd = random.Random(26)
    picks = [rnd.choice(trace_ids) for _ in range(GET_TRACE_CALLS)]
    del trace_ids

    async def get(i: int) -> None:
        t = await reader.get_trace(traces_pb2.GetTraceRequest(trace_id=picks[i].hex()))
        assert len(t.spans) == 5

    def searcher(req):
        async def search(_: int) -> None:
            assert (await reader.search(req)).traces
        return search

    rare = traces_pb2.SearchTracesRequest(start_time=_ts(now_ns - 14 * NS_PER_DAY + NS), end_time=_ts(now_ns),
                                          attributes={"bench.case": "needle"})
    common = traces_pb2.SearchTracesRequest(start_time=_ts(now_ns - NS_PER_DAY), end_time=_ts(now_ns),
                                            attributes={"gen_ai.tool.name": "search"})
    g = await _latencies(get, GET_TRACE_CALLS)
    r = await _latencies(searcher(rare), SEARCH_REPS)
    c = await _latencies(searcher(common), SEARCH_REPS)
    return {f"{prefix}_spans": float(spans), f"{prefix}_load_spans_per_s": spans / load_s,
            f"{prefix}_get_trace_p50_ms": statistics.median(g), **tail(f"{prefix}_get_trace", g),
            f"{prefix}_search_14d_rare_p50_ms": statistics.median(r),
            f"{prefix}_search_1d_common_p50_ms": statistics.median(c)}


async def _ingest(settings: CollectorSettings, payloads: list[bytes], **kw) -> float:
    srv = await create_server(settings, **kw)
    try:
        seconds = await send_all(srv.ports["otlp_grpc"], payloads)
    finally:
        await srv.stop(1.0)
    return sum(len(trace_service_pb2.ExportTraceServiceRequest.FromString(p).resource_spans[0].scope_spans[0].spans)
               for p in payloads) / seconds


def _settings(**kw) -> CollectorSettings:
    return CollectorSettings(otlp_grpc_listen="127.0.0.1:0", otlp_http_port=0, query_listen="127.0.0.1:0",
                             metrics_listen="", jwt_secret=SECRET, shutdown_grace_s=1.0, shutdown_drain_s=0, **kw)


async def run(ctx) -> dict[str, float]:
    try:
        return await _run(ctx)
    finally:
        ChdbTransport.shutdown_all()  # an engine left open to interpreter exit can crash the process


async def _run(ctx) -> dict[str, float]:
    now_ns = time.time_ns()
    payloads = [make_payload(i, now_ns) for i in range(EXPORTS)]
    chdb = ChdbTransport.shared(str(ctx.tmp / "chdb"))
    out: dict[str, float] = {"span_store_ingest_spans": float(EXPORTS * 1000)}

    # Ingest, both stores, same payloads.
    out["span_store_pg_ingest_spans_per_s"] = await _ingest(_settings(), payloads, database_url=await ctx.new_database())
    out["span_store_ch_ingest_spans_per_s"] = await _ingest(
        _settings(span_store="clickhouse", clickhouse_database="bench_ingest"), payloads, span_transport=chdb)

    # Queries and size on the 14-day set.
    url = await ctx.new_database()
    await migrate(url, SCHEMA, MIGRATIONS)
    pool = await create_pool(url, SCHEMA, 1, 4)
    try:
        pg = Repository(pool)
        await Retention(pg, retention_days=14, ahead_days=1, interval_s=3600, clock=lambda: now_ns).run_once()
        async def analyze() -> None:
            async with pool.acquire() as conn:
                await conn.execute("ANALYZE traces.spans")

        out.update(await query_figures("span_store_pg", pg, now_ns, analyze))
        async with pool.acquire() as conn:
            size = await conn.fetchval(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'traces.spans'::regclass")
            out["span_store_pg_bytes_per_span"] = int(size) / await pg.span_count()
    finally:
        await close_pool(pool)
    ch = ClickHouseStore(chdb, Tables("bench_query", "otel_traces"))
    await ch.create_schema(14)
    async def merge() -> None:
        for table in CH_TABLES:
            await chdb.command(f"OPTIMIZE TABLE bench_query.{table} FINAL")

    out.update(await query_figures("span_store_ch", ch, now_ns, merge))
    floor = await _latencies(lambda _: chdb.query("SELECT 1"), GET_TRACE_CALLS)
    out["span_store_ch_select1_p50_ms"] = statistics.median(floor)
    out.update(tail("span_store_ch_select1", floor))
    rows = await chdb.query("SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'bench_query'"
                            " AND table IN {tables:Array(String)} AND active", {"tables": list(CH_TABLES)})
    out["span_store_ch_bytes_per_span"] = int(rows[0][0]) / await ch.span_count()

    out["span_store_ch_vs_pg_ingest"] = out["span_store_ch_ingest_spans_per_s"] / out["span_store_pg_ingest_spans_per_s"]
    out["span_store_ch_vs_pg_bytes"] = out["span_store_ch_bytes_per_span"] / out["span_store_pg_bytes_per_span"]
    for db in ("bench_ingest", "bench_query"):
        await chdb.command(f"DROP DATABASE IF EXISTS {db}")
    return side_by_side(out)


def side_by_side(out: dict[str, float]) -> dict[str, float]:
    """`out` ordered so each ClickHouse figure follows its PostgreSQL counterpart (then their ratio, where
    issue 26 sets one): the bench prints figures in this order."""
    ordered = {k: v for k, v in out.items() if not k.startswith(("span_store_pg_", "span_store_ch_"))}
    for k, v in out.items():
        if k.startswith("span_store_pg_"):
            ordered[k] = v
            ch = k.replace("_pg_", "_ch_")
            if ch in out:
                ordered[ch] = out[ch]
            ratio = "span_store_ch_vs_pg_" + {"ingest_spans_per_s": "ingest", "bytes_per_span": "bytes"}.get(
                k.removeprefix("span_store_pg_"), "-")
            if ratio in out:
                ordered[ratio] = out[ratio]
    return ordered | out
