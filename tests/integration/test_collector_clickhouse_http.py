"""The production client path: the ClickHouse store over `HttpTransport` (`clickhouse-connect`, HTTP,
Native results, JSONEachRow inserts, `{name:Type}` parameters bound by the server) against the session's
ClickHouse engine behind tests/helpers/clickhouse_http.py (the stand-in for a server's HTTP interface),
and a collector configured with `clickhouse_url` only, as deployed."""
from __future__ import annotations

import time
import uuid

import pytest
from agentfeedback.traces.v1 import traces_pb2

from services.tracecollector.clickhouse import ClickHouseStore, Tables
from services.tracecollector.clickhouse_transport import ChdbTransport, ClickHouseError, HttpTransport
from services.tracecollector.ingest import Window, flatten
from services.tracecollector.server import create_server
from services.tracecollector.settings import CollectorSettings
from tests.helpers.clickhouse_http import clickhouse_http
from tests.helpers.otlp import NS, Collector, new_span_id, new_trace_id, one_trace, request, span, ts
from tests.stack import TEST_JWT_SECRET


@pytest.fixture
async def http_url(chdb_path):
    engine = ChdbTransport.shared(chdb_path)
    db = f"h_{uuid.uuid4().hex[:8]}"
    async with clickhouse_http(engine) as url:
        yield url, db
    await engine.command(f"DROP DATABASE IF EXISTS `{db}`")


async def test_a_collector_on_clickhouse_over_http_stores_and_answers_like_the_in_process_engine(http_url, tmp_path):
    url, db = http_url
    settings = CollectorSettings(
        otlp_grpc_listen="127.0.0.1:0", otlp_http_port=0, query_listen="127.0.0.1:0", metrics_listen="",
        jwt_secret=TEST_JWT_SECRET, data_dir=tmp_path, shutdown_grace_s=0.5, shutdown_drain_s=0,
        span_store="clickhouse", clickhouse_url=url, clickhouse_database=db)
    c = Collector(await create_server(settings), "")
    try:
        assert isinstance(c.server.repo._tx, HttpTransport)
        now = time.time_ns()
        tid, spans = one_trace(4, start_ns=now - 5 * NS, attrs={"i": 7, "b": False, "s": "x'\\y\n"})
        await c.otlp().Export(request(spans, service="chat"))
        got = await c.get_trace(tid)
        assert [s.start_time_unix_nano for s in got.spans] == sorted(s.start_time_unix_nano for s in spans)
        a = got.spans[0].attributes
        assert (a["i"], a["b"], a["s"]) == (7, False, "x'\\y\n")
        found = await c.query().SearchTraces(traces_pb2.SearchTracesRequest(
            start_time=ts(now - 60 * NS), end_time=ts(now), attributes={"s": "x'\\y\n"}, service_name="chat"),
            metadata=c.md())
        assert [(t.trace_id, t.span_count, t.root_span_name) for t in found.traces] == [(tid.hex(), 4, "root")]
        assert await c.span_rows() == 4
        dropped = await c.server.retention.run_once(now_ns=now + 15 * 86_400 * NS)
        assert dropped.dropped and await c.server.repo.day_dropped(dropped.dropped[0])
    finally:
        await c.close()


async def test_server_errors_surface_as_clickhouse_errors(http_url):
    url, db = http_url
    store = ClickHouseStore(HttpTransport(url), Tables(db, "otel_traces"))
    try:
        with pytest.raises(ClickHouseError):
            await store.get_trace(new_trace_id())  # no tables yet
        await store.create_schema(14)
        tid = new_trace_id()
        rows = flatten(request([span(tid, new_span_id(), start_ns=time.time_ns() - NS)]), Window(0, 2**62),
                       store.row_encoder).rows
        await store.copy_spans(rows)
        assert len(await store.get_trace(tid)) == 1  # its statements carry query settings (max_threads)
    finally:
        await store.close()
