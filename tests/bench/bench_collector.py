"""Trace collector benchmark (`make bench`, or `python -m tests.bench.run collector`).

Figures (issues 4, 17):
- `collector_ingest_spans_per_s`: OTLP/gRPC Exports of 1000 spans with realistic attributes, 4
  concurrent clients, each Export acknowledged only after its spans were committed. The collector
  runs as its own process (`agentfeedback-tracecollector`), the clients in this one.
- `copy_ceiling_rows_per_s`: asyncpg COPY of the same rows (already flattened, so no decoding and no
  gRPC) into the same schema with the same indexes: the physical limit of this design.
  Ingest and ceiling alternate in BENCH_COLLECTOR_INGEST_ROUNDS (3) rounds; `ingest_vs_copy_ceiling`
  = median of the per-round ratios (`_min` / `_max`: their spread, i.e. the machine's noise).
  `copy_on_conflict_rows_per_s`: the rejected alternative (unique key, COPY into a staging table +
  INSERT ... ON CONFLICT DO NOTHING), to show what de-duplicating on write would cost.
- `get_trace_p99_ms` (+ p50): GetTrace over gRPC on 15 daily partitions holding ≥ 3M spans (loaded
  with generate_series in SQL, traces of 5 spans).
- `search_1h_turns_p50_ms`, `search_1d_attr_p50_ms`, `search_14d_rare_attr_p50_ms` (+ `_p99_ms`):
  SearchTraces first pages on the same spans, three SRE questions of growing width (see
  `_search_queries`; targets 1 day common ≤ 50 ms, 14 days rare ≤ 100 ms); baseline in the same run:
  `search_*_full_scan_ms`, the one-statement search of before the attribute index, `*_vs_full_scan`.
- Retention (`collector_retention.py`): drop of a 200k-span vs a 2M-span day, Export p99 during passes.
- `phoenix_ingest_spans_per_s`: Arize Phoenix PHOENIX_VERSION (pinned; `phoenix_version` in the
  figures), installed only for this benchmark into `.bench/phoenix-venv`, `phoenix serve` with its own
  fresh database on the same PostgreSQL, before the 3M-span load. Our collector (its own fresh
  database) and Phoenix get the same Export payloads with the same client code, alternating in
  PHOENIX_ROUNDS rounds (each round's payloads go to ours, then to Phoenix):
  `collector_same_payloads_spans_per_s` is ours on exactly those payloads. Phoenix acknowledges an
  Export before writing it (its bulk inserter commits later), so `phoenix_committed_spans_per_s`
  (spans visible in its database per second from the round's first Export) is reported too.
  `ingest_vs_phoenix` = the median of the rounds' ratios ours / Phoenix's acknowledged rate (the
  comparison most favourable to Phoenix); `ingest_vs_phoenix_committed` the same against its commits.

Environment: BENCH_COLLECTOR_PARTS=ingest,gettrace,phoenix (default: all; ingest includes the COPY ceiling);
BENCH_COLLECTOR_GET_TRACE_SPANS (default 3_000_000); BENCH_COLLECTOR_EXPORTS (default 120);
BENCH_COLLECTOR_PHOENIX_EXPORTS (default 12: the first 12 of the same payloads, split over the rounds).
A smoke run (`SMOKE`) leaves Phoenix out (installing it takes minutes and the network).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

import asyncpg
import grpc
from agentfeedback.traces.v1 import traces_pb2, traces_pb2_grpc
from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from services.common.auth import mint_token
from tests.helpers.otlp import kv
from services.common.db import create_pool, migrate
from services.tracecollector.ingest import NS_PER_DAY, Window, flatten
from services.tracecollector.repository import SPAN_COLUMNS, Repository, partition_name
from services.tracecollector.retention import Retention
from services.tracecollector.server import MIGRATIONS, SCHEMA
from tests.bench.collector_retention import BIG, SMALL, retention_figures, spans_tablespace
from tests.bench.stats import tail
from tests.helpers.ports import PortTaken, free_ports, listens, start_owning

ROOT = Path(__file__).resolve().parents[2]
PHOENIX_VENV = ROOT / ".bench" / "phoenix-venv"
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SECRET = "bench-secret-0123456789abcdef0123456789abcdef"
SPANS_PER_EXPORT = 1000
EXPORTS = int(os.environ.get("BENCH_COLLECTOR_EXPORTS", "120"))
CLIENTS = 4
PHOENIX_EXPORTS = int(os.environ.get("BENCH_COLLECTOR_PHOENIX_EXPORTS", "12"))
PHOENIX_VERSION = "20.26.1"  # pinned: a comparison names the version it ran against
PHOENIX_ROUNDS = 3
PARTS = os.environ.get("BENCH_COLLECTOR_PARTS", "ingest,gettrace,phoenix")
GET_TRACE_SPANS = int(os.environ.get("BENCH_COLLECTOR_GET_TRACE_SPANS", "3000000"))
GET_TRACE_CALLS = 2000  # after 200 warm-up calls
SEARCH_REPS = 11
RETENTION_DAY_SPANS = (SMALL, BIG)  # collector_retention's days: small, big
RETENTION_EXPORTS_PER_ROUND = 60
SMOKE = {"EXPORTS": 8, "INGEST_ROUNDS": 1, "PARTS": "ingest,gettrace", "GET_TRACE_SPANS": 15_000,
         "GET_TRACE_CALLS": 20, "SEARCH_REPS": 2,
         "RETENTION_DAY_SPANS": (2_000, 4_000), "RETENTION_EXPORTS_PER_ROUND": 6}
NS = 1_000_000_000
# Loading a day of spans (and VACUUM of a 2M-span day) runs longer than the services' 30 s statement timeout.
LOAD_TIMEOUT_S = 3600.0


# --- payloads ----------------------------------------------------------------------------------


def _append(attrs, key: str, value: object) -> None:
    attrs.append(kv(key, value))


def make_payload(i: int, now_ns: int) -> bytes:
    """One Export of 1000 spans: 200 agent turns of 5 spans with the attributes our services set."""
    rnd = random.Random(i)
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    for k, v in {"service.name": f"agentfeedback-{('chat', 'agent', 'feedback', 'worker')[i % 4]}",
                 "service.namespace": "agentfeedback", "service.version": "0.1.0", "host.name": f"node-{i % 3}",
                 "telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry",
                 "telemetry.sdk.version": "1.45.2", "deployment.environment": "bench"}.items():
        _append(rs.resource.attributes, k, v)
    ss = rs.scope_spans.add()
    ss.scope.name, ss.scope.version = "services.chat", "0.1.0"
    base = now_ns - 600 * NS
    for t in range(SPANS_PER_EXPORT // 5):
        tid = rnd.randbytes(16)
        ids = [rnd.randbytes(8) for _ in range(5)]
        start = base + rnd.randrange(500 * NS)
        turn = ss.spans.add(trace_id=tid, span_id=ids[0], name="chat.turn", kind=trace_pb2.Span.SPAN_KIND_SERVER,
                            start_time_unix_nano=start, end_time_unix_nano=start + 900_000_000)
        for k, v in {"rpc.system": "grpc", "rpc.service": "agentfeedback.chat.v1.ChatService",
                     "rpc.method": "SendMessage", "chat.instance": f"instances/{rnd.randrange(1000)}",
                     "chat.turn_index": t, "enduser.id": f"user-{rnd.randrange(100)}",
                     "chat.channel": "voice" if t % 3 == 0 else "text"}.items():
            _append(turn.attributes, k, v)
        ev = turn.events.add(name="chat.in", time_unix_nano=start + 1000)
        _append(ev.attributes, "message.id", rnd.randbytes(8).hex())
        ev = turn.events.add(name="chat.out", time_unix_nano=start + 899_000_000)
        _append(ev.attributes, "message.id", rnd.randbytes(8).hex())
        think = ss.spans.add(trace_id=tid, span_id=ids[1], parent_span_id=ids[0], name="agent.think",
                             kind=trace_pb2.Span.SPAN_KIND_CLIENT, start_time_unix_nano=start + 1_000_000,
                             end_time_unix_nano=start + 880_000_000)
        for k, v in {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
                     "gen_ai.usage.input_tokens": rnd.randrange(50, 4000),
                     "gen_ai.usage.output_tokens": rnd.randrange(10, 800),
                     "gen_ai.response.finish_reasons": ["stop"], "gen_ai.request.temperature": 0.2}.items():
            _append(think.attributes, k, v)
        for j in (2, 3):
            tool = ss.spans.add(trace_id=tid, span_id=ids[j], parent_span_id=ids[1], name="tool.call",
                                kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
                                start_time_unix_nano=start + j * 100_000_000,
                                end_time_unix_nano=start + j * 100_000_000 + rnd.randrange(1, 90_000_000))
            for k, v in {"gen_ai.tool.name": ("search", "read_file", "record_feedback")[j % 3],
                         "gen_ai.tool.call.id": f"call_{rnd.randbytes(6).hex()}",
                         "gen_ai.tool.arguments": '{"query": "how many agents do you have in total", "limit": 10}',
                         "gen_ai.tool.result.size": rnd.randrange(100, 20000), "chat.truncated": j == 3}.items():
                _append(tool.attributes, k, v)
        db = ss.spans.add(trace_id=tid, span_id=ids[4], parent_span_id=ids[0], name="INSERT chat.messages",
                          kind=trace_pb2.Span.SPAN_KIND_CLIENT, start_time_unix_nano=start + 885_000_000,
                          end_time_unix_nano=start + 888_000_000)
        for k, v in {"db.system": "postgresql", "db.name": "agentfeedback", "server.address": "127.0.0.1",
                     "db.statement": "INSERT INTO chat.messages (id, instance, trace_id, role, content) "
                                     "VALUES ($1, $2, $3, $4, $5)", "db.rows_affected": 1}.items():
            _append(db.attributes, k, v)
    return req.SerializeToString()


async def send_all(port: int, payloads: list[bytes], clients: int = CLIENTS) -> float:
    """Send every payload over `clients` channels (one Export in flight each); seconds taken."""
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(clients)]
    queue = list(reversed(payloads))

    async def client(ch: grpc.aio.Channel) -> None:
        export = ch.unary_unary(EXPORT_METHOD)  # raw bytes in and out: no client-side encoding cost
        while queue:
            body = queue.pop()
            give_up = time.monotonic() + 300
            while True:  # what an OTLP exporter does on backpressure: retry UNAVAILABLE after a pause
                try:
                    await export(body, timeout=60)
                    break
                except grpc.aio.AioRpcError as e:
                    if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > give_up:
                        raise
                    await asyncio.sleep(0.2)

    try:
        await asyncio.gather(*(c.channel_ready() for c in channels))
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for c in channels))
        return time.perf_counter() - t0
    finally:
        for c in channels:
            await c.close()


# --- processes ---------------------------------------------------------------------------------


async def _wait_port(port: int, proc: subprocess.Popen, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {port}") from None
            await asyncio.sleep(0.5)


class CollectorProcess:
    """`python -m services.tracecollector.main` against `url`, on free ports (checked: `start_owning`)."""

    def __init__(self, url: str, tmp: Path, **env: str):
        grpc_port, http_port, query_port = free_ports(3)
        self._ports = {"grpc": grpc_port, "http": http_port, "query": query_port}
        self._env = {**os.environ, "OTEL_SDK_DISABLED": "true", "AGENTFEEDBACK_COLLECTOR_DATABASE_URL": url,
                     "AGENTFEEDBACK_COLLECTOR_DATA_DIR": str(tmp), "AGENTFEEDBACK_COLLECTOR_JWT_SECRET": SECRET,
                     "AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN": f"127.0.0.1:{grpc_port}",
                     "AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_PORT": str(http_port),
                     "AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN": f"127.0.0.1:{query_port}",
                     "AGENTFEEDBACK_COLLECTOR_METRICS_LISTEN": "127.0.0.1:0",
                     "AGENTFEEDBACK_COLLECTOR_LOG_LEVEL": "WARNING", **env}

    async def __aenter__(self) -> Self:
        self.proc, _ = await start_owning(
            lambda e: subprocess.Popen([sys.executable, "-m", "services.tracecollector.main"], cwd=ROOT, env=e),
            self._env, self._ports, ("grpc", "http", "query"), "query", 90)
        self.grpc_port, self.http_port, self.query_port = (self._ports[k] for k in ("grpc", "http", "query"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# --- parts -------------------------------------------------------------------------------------


async def _count(url: str, sql: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


INGEST_ROUNDS = int(os.environ.get("BENCH_COLLECTOR_INGEST_ROUNDS", "3"))


async def bench_ingest_and_ceiling(ctx, payloads: list[bytes], now_ns: int) -> dict[str, float]:
    """Collector ingest and the COPY ceiling in alternating rounds (INGEST_ROUNDS each, the same
    Export payloads split across rounds), so both see the same machine: the ratio is the median of
    the per-round ratios. The ceiling is the better of 2 and 4 COPY workers in each round, into its
    own database with the same schema and indexes (truncated before each round)."""
    url, ceiling_url = await ctx.new_database(), await ctx.new_database()
    await migrate(ceiling_url, SCHEMA, MIGRATIONS)
    pool = await create_pool(ceiling_url, SCHEMA, 2, 4)
    window = Window.at(now_ns, 14, 3600)
    warm, measured = payloads[:4], payloads[4:]
    per_round = len(measured) // INGEST_ROUNDS
    ingest, ceiling = [], []
    try:
        repo = Repository(pool)
        await Retention(repo, retention_days=14, ahead_days=3, interval_s=3600).run_once(now_ns)
        async with CollectorProcess(url, ctx.tmp) as c:
            await send_all(c.grpc_port, warm)  # warm-up: connections, statement caches
            for r in range(INGEST_ROUNDS):
                chunk = measured[r * per_round:(r + 1) * per_round]
                ingest.append(len(chunk) * SPANS_PER_EXPORT / await send_all(c.grpc_port, chunk))
                batches = [flatten(trace_service_pb2.ExportTraceServiceRequest.FromString(p), window).rows
                           for p in chunk]
                ceiling.append(max([await _copy_rate(pool, repo, batches, w) for w in (2, 4)]))
        stored = await _count(url, "SELECT count(*) FROM traces.spans")
        sent = (len(warm) + per_round * INGEST_ROUNDS) * SPANS_PER_EXPORT
        if stored != sent:
            raise AssertionError(f"{stored} spans stored, {sent} acknowledged")
        all_batches = [flatten(trace_service_pb2.ExportTraceServiceRequest.FromString(p), window).rows
                       for p in payloads]
        return {
            "collector_ingest_spans_per_s": statistics.median(ingest),
            "copy_ceiling_rows_per_s": statistics.median(ceiling),
            "ingest_vs_copy_ceiling": statistics.median(i / c for i, c in zip(ingest, ceiling, strict=True)),
            "ingest_vs_copy_ceiling_min": min(i / c for i, c in zip(ingest, ceiling, strict=True)),
            "ingest_vs_copy_ceiling_max": max(i / c for i, c in zip(ingest, ceiling, strict=True)),
            "copy_on_conflict_rows_per_s": await _copy_on_conflict_rate(ctx, all_batches, now_ns),
        }
    finally:
        await pool.close()


async def _copy_rate(pool, repo: Repository, batches: list[list[tuple]], workers: int) -> float:
    """Rows/s of COPYing `batches` with `workers` concurrent writers into an emptied `spans`."""
    async with pool.acquire() as conn:
        await conn.execute("TRUNCATE traces.spans")
    todo = list(reversed(batches))

    async def worker() -> None:
        while todo:
            await repo.copy_spans(todo.pop())

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return sum(len(b) for b in batches) / (time.perf_counter() - t0)


# The alternative to de-duplicating at read time: a unique key (replacing the trace_id index, which it
# covers) and COPY into a staging table + INSERT ... ON CONFLICT DO NOTHING, per batch.
UNIQUE_KEY = [
    "DROP INDEX traces.spans_trace_id_idx",
    "ALTER TABLE traces.spans ADD PRIMARY KEY (trace_id, span_id, start_ns)",
]
STAGING = "CREATE TEMP TABLE IF NOT EXISTS staging (LIKE traces.spans) ON COMMIT DELETE ROWS"
MERGE = "INSERT INTO traces.spans SELECT * FROM staging ON CONFLICT DO NOTHING"


async def _copy_on_conflict_rate(ctx, batches: list[list[tuple]], now_ns: int) -> float:
    url = await ctx.new_database()
    await migrate(url, SCHEMA, MIGRATIONS)
    pool = await create_pool(url, SCHEMA, 2, 4)
    try:
        await Retention(Repository(pool), retention_days=14, ahead_days=3, interval_s=3600).run_once(now_ns)
        async with pool.acquire() as conn:
            for stmt in UNIQUE_KEY:
                await conn.execute(stmt)
        todo = list(reversed(batches))

        async def worker() -> None:
            async with pool.acquire() as conn:
                await conn.execute(STAGING)
                while todo:
                    rows = todo.pop()
                    async with conn.transaction():
                        await conn.copy_records_to_table("staging", records=rows, columns=SPAN_COLUMNS)
                        await conn.execute(MERGE)

        t0 = time.perf_counter()
        await asyncio.gather(worker(), worker())
        return len(batches) * SPANS_PER_EXPORT / (time.perf_counter() - t0)
    finally:
        await pool.close()


LOAD_DAY = """
INSERT INTO traces.{part} (trace_id, span_id, parent_span_id, start_ns, end_ns, name, kind, status_code,
  status_message, service_name, scope_name, trace_state, attributes, resource_attributes, events, links)
SELECT decode(md5($1 || ':' || (i / 5)), 'hex'),
       substr(decode(md5($1 || ':' || i || 's'), 'hex'), 1, 8),
       CASE WHEN i % 5 = 0 THEN NULL ELSE substr(decode(md5($1 || ':' || (i - i % 5) || 's'), 'hex'), 1, 8) END,
       $2::bigint + (i / 5) * $4::bigint + (i % 5) * 1000000,
       $2::bigint + (i / 5) * $4::bigint + (i % 5) * 1000000 + 800000 + (i % 7) * 1000,
       (ARRAY['chat.turn','agent.think','tool.call','tool.call','INSERT chat.messages'])[i % 5 + 1],
       CASE i % 5 WHEN 0 THEN 2 ELSE 1 END, 0, '',
       'agentfeedback-' || (ARRAY['chat','agent','feedback','worker'])[(i / 5) % 4 + 1], 'services.chat', '',
       jsonb_build_object('gen_ai.tool.name', 'search', 'gen_ai.tool.call.id', 'call_' || i,
         'gen_ai.usage.input_tokens', i % 4000, 'rpc.system', 'grpc', 'chat.turn_index', i / 5,
         'gen_ai.tool.arguments', '{{"query": "how many agents do you have in total", "limit": 10}}'),
       '{{"service.name": "agentfeedback-chat", "service.namespace": "agentfeedback", "service.version": "0.1.0",
         "host.name": "node-1", "telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry"}}'::jsonb,
       CASE WHEN i % 5 = 0 THEN '[{{"time_unix_nano": 1, "name": "chat.in", "attributes": {{}}}}]'::jsonb END,
       NULL
FROM generate_series(0, $3 - 1) i
"""


def _loaded_trace_id(day: str, k: int) -> bytes:
    return hashlib.md5(f"{day}:{k}".encode()).digest()


def _ts(ns: int) -> Timestamp:
    return Timestamp(seconds=ns // NS, nanos=ns % NS)


def _search_queries(now_ns: int, day_starts: list[int], rare_turn: int) -> dict[str, traces_pb2.SearchTracesRequest]:
    """Three SRE questions on the loaded spans: `search_1h_turns`: the last hour's `chat.turn` spans of
    one service; `search_1d_attr`: a day of spans with a common attribute value (every loaded span has
    it); `search_14d_rare_attr`: the whole retention window for one rare attribute value (a single
    turn's `chat.turn_index`: 5 spans a day)."""
    newest = max(day_starts) + NS_PER_DAY
    queries = {
        "search_1h_turns": traces_pb2.SearchTracesRequest(
            start_time=_ts(now_ns - 3600 * NS), end_time=_ts(now_ns), service_name="agentfeedback-chat",
            span_name="chat.turn"),
        "search_1d_attr": traces_pb2.SearchTracesRequest(
            start_time=_ts(now_ns - NS_PER_DAY), end_time=_ts(now_ns), attributes={"gen_ai.tool.name": "search"}),
        "search_14d_rare_attr": traces_pb2.SearchTracesRequest(
            start_time=_ts(newest - 14 * NS_PER_DAY), end_time=_ts(newest), attributes={"chat.turn_index": str(rare_turn)}),
    }
    return queries


async def _search_latencies(stub, md, now_ns: int, day_starts: list[int], rare_turn: int) -> dict[str, float]:
    """SearchTraces p50 and max (ms, SEARCH_REPS calls each after one warm-up, page_size 50, first
    page: too few calls for a p99)."""
    reps = SEARCH_REPS
    queries = _search_queries(now_ns, day_starts, rare_turn)
    out: dict[str, float] = {}
    for name, req in queries.items():
        lat = []
        for i in range(reps + 1):
            t = time.perf_counter()
            resp = await stub.SearchTraces(req, metadata=md, timeout=120)
            if i:
                lat.append((time.perf_counter() - t) * 1000)
        if not resp.traces:
            raise AssertionError(f"{name}: no trace found")
        lat.sort()
        out[f"{name}_p50_ms"] = lat[len(lat) // 2]
        out |= tail(name, lat)
    return out


# Baseline, same run: the search as it was before the attribute index (one statement over the whole
# range: every span of the window read, grouped by trace, sorted), on the same data.
FULL_SCAN_SEARCH = """
SELECT trace_id, min(start_ns) AS first_start FROM traces.spans s
WHERE start_ns >= $1 AND start_ns < $2
  AND NOT EXISTS (SELECT 1 FROM jsonb_each_text($3::jsonb) f WHERE (s.attributes ->> f.key) IS DISTINCT FROM f.value)
GROUP BY trace_id ORDER BY first_start DESC, trace_id DESC LIMIT 51"""


async def _search_full_scan(pool, now_ns: int, day_starts: list[int], ours: dict[str, float], rare_turn: int
                            ) -> dict[str, float]:
    """`search_*_full_scan_ms` (best of 2) and `search_*_vs_full_scan` for the two attribute questions."""
    out: dict[str, float] = {}
    for name, req in _search_queries(now_ns, day_starts, rare_turn).items():
        if not req.attributes:
            continue
        lo, hi = req.start_time.seconds * NS + req.start_time.nanos, req.end_time.seconds * NS + req.end_time.nanos
        best = float("inf")
        async with pool.acquire() as conn:
            for _ in range(2):
                t = time.perf_counter()
                await conn.fetch(FULL_SCAN_SEARCH, lo, hi, json.dumps(dict(req.attributes)))
                best = min(best, (time.perf_counter() - t) * 1000)
        out[f"{name}_full_scan_ms"] = best
        out[f"{name}_vs_full_scan"] = ours[f"{name}_p50_ms"] / best
    return out


async def bench_get_trace(ctx, now_ns: int, payloads: list[bytes]) -> dict[str, float]:
    total = GET_TRACE_SPANS
    days = 15
    per_day = total // days // 5 * 5
    url = await ctx.new_database()
    await spans_tablespace(url)
    await migrate(url, SCHEMA, MIGRATIONS)
    pool = await create_pool(url, SCHEMA, 2, 4, command_timeout_s=LOAD_TIMEOUT_S)
    try:
        repo = Repository(pool)
        retention = Retention(repo, retention_days=14, ahead_days=3, interval_s=3600)
        await retention.run_once(now_ns)
        today = now_ns // NS_PER_DAY * NS_PER_DAY
        # The 13 previous days, today and tomorrow: 15 partitions that retention keeps.
        day_starts = [today - d * NS_PER_DAY for d in range(-1, days - 1)]
        t0 = time.perf_counter()
        todo = list(day_starts)

        async def loader() -> None:
            async with pool.acquire() as conn:
                while todo:
                    start = todo.pop()
                    day = time.strftime("%Y%m%d", time.gmtime(start // NS))
                    await conn.execute(LOAD_DAY.format(part=partition_name(_date(start))), day, start, per_day,
                                       (NS_PER_DAY - 10 * NS) // (per_day // 5))

        await asyncio.gather(loader(), loader())
        async with pool.acquire() as conn:
            await conn.execute("ANALYZE traces.spans")
            stored = await conn.fetchval("SELECT count(*) FROM traces.spans")
        load_s = time.perf_counter() - t0
        # The pass that follows a day's end merges its attribute index's pending list (retention.py).
        t1 = time.perf_counter()
        await retention.run_once(now_ns)
        settle_ms = (time.perf_counter() - t1) * 1000
        async with CollectorProcess(url, ctx.tmp) as c:
            md = (("authorization", f"Bearer {mint_token(SECRET, 'bench', ('traces:read',))}"),)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{c.query_port}") as ch:
                stub = traces_pb2_grpc.TraceQueryServiceStub(ch)
                rnd = random.Random(7)
                lat: list[float] = []
                for i in range(200 + GET_TRACE_CALLS):
                    start = rnd.choice(day_starts)
                    day = time.strftime("%Y%m%d", time.gmtime(start // NS))
                    tid = _loaded_trace_id(day, rnd.randrange(per_day // 5)).hex()
                    t1 = time.perf_counter()
                    tr = await stub.GetTrace(traces_pb2.GetTraceRequest(trace_id=tid), metadata=md)
                    if i >= 200:  # the first 200 warm the statement cache and the connection pool
                        lat.append((time.perf_counter() - t1) * 1000)
                    if len(tr.spans) != 5:
                        raise AssertionError(f"trace {tid}: {len(tr.spans)} spans")
                search = await _search_latencies(stub, md, now_ns, day_starts, rare_turn=per_day // 5 // 2)
                search |= await _search_full_scan(pool, now_ns, day_starts, search, rare_turn=per_day // 5 // 2)
            kept = await retention_figures(pool, repo, LOAD_DAY, c.grpc_port, payloads, now_ns, *RETENTION_DAY_SPANS,
                                           RETENTION_EXPORTS_PER_ROUND)
        lat.sort()
        return {
            "get_trace_p50_ms": lat[len(lat) // 2], **tail("get_trace", lat),
            "get_trace_spans_stored": float(stored), "get_trace_load_s": load_s, **search, **kept,
            "retention_settle_pass_ms": settle_ms,
        }
    finally:
        await pool.close()


def _date(ns: int):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ns // NS, UTC).date()


def _ensure_phoenix() -> Path:
    """`.bench/phoenix-venv` holding arize-phoenix[pg]==PHOENIX_VERSION (installed when it holds another)."""
    exe = PHOENIX_VENV / "bin" / "phoenix"
    has_pg = any((PHOENIX_VENV / "lib").glob("python*/site-packages/asyncpg"))
    if not exe.exists() or not has_pg or _phoenix_version() != PHOENIX_VERSION:
        subprocess.run([sys.executable, "-m", "venv", str(PHOENIX_VENV)], check=True)
        subprocess.run([str(PHOENIX_VENV / "bin" / "pip"), "install", "-q", f"arize-phoenix[pg]=={PHOENIX_VERSION}"],
                       check=True)
    got = _phoenix_version()
    if got != PHOENIX_VERSION:
        raise RuntimeError(f"Phoenix {got} installed, {PHOENIX_VERSION} expected")
    return exe


def _phoenix_version() -> str | None:
    py = PHOENIX_VENV / "bin" / "python"
    if not py.exists():
        return None
    r = subprocess.run([str(py), "-c", "import importlib.metadata as m; print(m.version('arize-phoenix'))"],
                       capture_output=True, text=True, check=False)
    return r.stdout.strip() or None


async def _committed_rate(url: str, base: int, n: int, t0: float) -> float:
    """Spans per second from `t0` until `base + n` spans are visible in Phoenix's database (300 s at most)."""
    sql = "SELECT count(*) FROM public.spans"
    deadline = time.perf_counter() + 300
    committed = base
    while committed < base + n and time.perf_counter() < deadline:
        await asyncio.sleep(0.2)
        committed = await _count(url, sql)
    return (committed - base) / (time.perf_counter() - t0)


async def bench_phoenix(ctx, payloads: list[bytes]) -> dict[str, float]:
    """Ours and Phoenix on the same payloads, alternating (see the module docstring)."""
    exe = await asyncio.to_thread(_ensure_phoenix)
    print(f"   Phoenix {PHOENIX_VERSION} (pinned) against our collector on the same payloads", flush=True)
    url, ours_url = await ctx.new_database(), await ctx.new_database()
    grpc_port, http_port = free_ports(2)
    workdir = ctx.tmp / "phoenix"
    workdir.mkdir(exist_ok=True)
    env = {**os.environ, "PHOENIX_SQL_DATABASE_URL": url, "PHOENIX_GRPC_PORT": str(grpc_port),
           "PHOENIX_PORT": str(http_port), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_WORKING_DIR": str(workdir),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = (ctx.tmp / "phoenix.log").open("w")
    proc = subprocess.Popen([str(exe), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: ASYNC220
    sql = "SELECT count(*) FROM public.spans"
    ours, acked, committed = [], [], []
    try:
        await _wait_port(grpc_port, proc)
        await _wait_port(http_port, proc)
        if not (listens(proc.pid, grpc_port) and listens(proc.pid, http_port)):  # picked free, taken meanwhile
            raise PortTaken(f"Phoenix's ports {grpc_port} / {http_port} are another process's: run again")
        async with CollectorProcess(ours_url, ctx.tmp) as c:
            # Phoenix ingests ~2 orders of magnitude slower: a subset keeps `make bench` to minutes.
            warm, measured = payloads[:2], payloads[2:2 + PHOENIX_EXPORTS]
            await send_all(c.grpc_port, warm)
            await send_all(grpc_port, warm)
            while await _count(url, sql) < len(warm) * SPANS_PER_EXPORT:  # warm-up committed
                await asyncio.sleep(0.2)
            per_round = max(1, len(measured) // PHOENIX_ROUNDS)
            for r in range(PHOENIX_ROUNDS):
                chunk = measured[r * per_round:(r + 1) * per_round]
                n = len(chunk) * SPANS_PER_EXPORT
                ours.append(n / await send_all(c.grpc_port, chunk))
                base = await _count(url, sql)
                t0 = time.perf_counter()
                acked.append(n / await send_all(grpc_port, chunk))
                committed.append(await _committed_rate(url, base, n, t0))
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    return {"phoenix_version": PHOENIX_VERSION,
            "collector_same_payloads_spans_per_s": statistics.median(ours),
            "phoenix_ingest_spans_per_s": statistics.median(acked),
            "phoenix_committed_spans_per_s": statistics.median(committed),
            "ingest_vs_phoenix": statistics.median(o / a for o, a in zip(ours, acked, strict=True)),
            "ingest_vs_phoenix_committed": statistics.median(o / k for o, k in zip(ours, committed, strict=True))}


async def run(ctx) -> dict[str, float]:
    parts = set(PARTS.split(","))
    now_ns = time.time_ns()
    payloads = [make_payload(i, now_ns) for i in range(EXPORTS)]
    out: dict[str, float] = {}
    if "ingest" in parts:
        out.update(await bench_ingest_and_ceiling(ctx, payloads, now_ns))
    if "phoenix" in parts:  # before the 3M-span load, each on a fresh database
        out.update(await bench_phoenix(ctx, payloads))
    if "gettrace" in parts:
        out.update(await bench_get_trace(ctx, now_ns, payloads))
    return out
