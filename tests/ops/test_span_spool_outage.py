"""Spans survive an outage of the collector's database (issue 25: the export gave a batch up after
≈ 7 s, so the spans of turns acknowledged just before PostgreSQL stopped were lost): a service's export
child keeps what the collector refuses in its on-disk spool and sends it when the collector takes
spans again — across a restart of the service during the outage too — and nothing is dropped.
Real processes: the export children, the collector's own PostgreSQL cluster (stopped and started)."""
from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from services.common.db import embedded_postgres_server
from services.common.span_pipe import ProcessSpanProcessor
from services.tracecollector.server import create_server
from services.tracecollector.settings import CollectorSettings
from tests.helpers.otlp import Collector
from tests.helpers.procs import start_postgres_again, stop_postgres_fast
from tests.stack import TEST_JWT_SECRET

# Longer than the exporter's own retries used to last (≈ 7 s), in two halves: the service restarts
# between them.
OUTAGE_HALF_S = 5.0
pytestmark = pytest.mark.slow


def _provider(spool: Path) -> tuple[TracerProvider, ProcessSpanProcessor]:
    resource = Resource.create({"service.name": "spool-test"})
    processor = ProcessSpanProcessor(resource, "spool-test", spool_dir=spool, spool_max_bytes=8 * 1024 * 1024)
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(processor)
    return tp, processor


async def _emit(tp: TracerProvider, seconds: float, trace_ids: list[int]) -> None:
    tracer = tp.get_tracer("agentfeedback.test")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with tracer.start_as_current_span("chat.turn") as s:
            pass
        trace_ids.append(s.get_span_context().trace_id)
        await asyncio.sleep(0.05)


async def _stored(collector: Collector, trace_id: int) -> bool:
    try:
        return len((await collector.get_trace(trace_id.to_bytes(16, "big"))).spans) == 1
    except grpc.aio.AioRpcError as e:
        if e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE):
            return False
        raise


async def test_spans_ended_during_a_collector_database_outage_arrive_after_it_even_across_a_restart(
        tmp_path, monkeypatch):
    pgdata = Path(tempfile.mkdtemp(prefix="af-spool-pg-")) / "pg"
    pg = embedded_postgres_server(pgdata, cleanup_mode="delete")
    settings = CollectorSettings(otlp_grpc_listen="127.0.0.1:0", otlp_http_host="127.0.0.1", otlp_http_port=0,
                                 query_listen="127.0.0.1:0", jwt_secret=TEST_JWT_SECRET, data_dir=tmp_path,
                                 shutdown_grace_s=0.5, shutdown_drain_s=0)
    collector = Collector(await create_server(settings, database_url=pg.get_uri("postgres")), pg.get_uri("postgres"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{collector.ports['otlp_grpc']}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "AGENTFEEDBACK_SPAN_EXPORT"):
        monkeypatch.delenv(name, raising=False)
    spool = tmp_path / "spool"
    providers = []
    try:
        tp, first = _provider(spool)
        providers.append(tp)
        before: list[int] = []
        await _emit(tp, 0.5, before)
        deadline = time.monotonic() + 20
        while not all([await _stored(collector, t) for t in before]):
            assert time.monotonic() < deadline, "spans before the outage never arrived"
            await asyncio.sleep(0.1)

        await stop_postgres_fast(pgdata)
        during: list[int] = []
        await _emit(tp, OUTAGE_HALF_S, during)
        await asyncio.to_thread(tp.shutdown)  # the service stops while the collector refuses
        assert list(spool.glob("*.spool")), "the stopping service left nothing in its spool"
        tp, second = _provider(spool)  # … and starts again, finding its spool
        providers.append(tp)
        await _emit(tp, OUTAGE_HALF_S, during)
        await start_postgres_again(pgdata)

        deadline = time.monotonic() + 60
        missing = list(during)
        while missing:
            missing = [t for t in missing if not await _stored(collector, t)]
            assert time.monotonic() < deadline, f"{len(missing)} of {len(during)} spans never arrived"
            await asyncio.sleep(0.2)
        assert first.spool_state()[0] == 0 and second.spool_state()[0] == 0  # nothing dropped
        deadline = time.monotonic() + 20
        while list(spool.glob("*.spool")):  # every spooled batch taken and removed
            assert time.monotonic() < deadline, list(spool.glob("*.spool"))
            await asyncio.sleep(0.1)
    finally:
        for tp in providers:
            await asyncio.to_thread(tp.shutdown)
        await collector.close()
        await asyncio.to_thread(pg.cleanup)
