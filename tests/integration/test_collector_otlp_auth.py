"""Opt-in bearer-token authentication of OTLP ingest (`otlp_bearer_tokens`, services/tracecollector/
ingest_auth.py) against a real collector on loopback, real PostgreSQL, the real OpenTelemetry SDK and its
OTLP exporters (configured only through the standard OTEL_EXPORTER_OTLP_HEADERS variables), and our own
services' span export child: the right token stores, a wrong or missing one is UNAUTHENTICATED / 401 and
stores nothing, two tokens are both taken, no setting leaves ingest as it was."""
from __future__ import annotations

import asyncio
import time

import aiohttp
import grpc
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from services.common.errors import error_info
from tests.helpers.otlp import Collector, one_trace, request
from tests.helpers.scrape import scrape, value

TOKEN = "tok-" + "a1" * 16
OTHER = "tok-" + "b2" * 16
WRONG = "tok-" + "c3" * 16
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
REFUSED = "agentfeedback_collector_ingest_unauthenticated_total"


@pytest.fixture
def clean_otel_env(monkeypatch):
    """No exporter variable of the caller's environment leaks into these exporters."""
    for name in (*HEADER_VARIABLES, "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_EXPORTER",
                 "OTEL_SDK_DISABLED", "AGENTFEEDBACK_SPAN_EXPORT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


async def _guarded(start_collector, tokens: str = TOKEN) -> Collector:
    return await start_collector(otlp_bearer_tokens=tokens, metrics_listen="127.0.0.1:0")


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _sdk_spans(service: str):
    """Two ended spans (a root and its child) made by the real SDK: (spans, trace id bytes)."""
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: PLC0415

    memory = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    tracer = tp.get_tracer("test")
    with tracer.start_as_current_span("chat.turn") as root, tracer.start_as_current_span("tool.call"):
        pass
    return memory.get_finished_spans(), root.get_span_context().trace_id.to_bytes(16, "big")


def _sdk_exporter(transport: str, c: Collector):
    """The SDK's own OTLP exporter for `transport`, built as an SRE's service builds it: endpoint only, the
    headers from the OTEL_EXPORTER_OTLP_*HEADERS variables."""
    if transport == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter  # noqa: PLC0415

        return OTLPSpanExporter(endpoint=f"127.0.0.1:{c.ports['otlp_grpc']}", insecure=True)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415

    return OTLPSpanExporter(endpoint=c.http_url)


async def _sdk_export(transport: str, c: Collector, service: str):
    """(SpanExportResult, trace id) of one export of two SDK spans through the SDK's exporter."""
    spans, tid = _sdk_spans(service)
    exporter = _sdk_exporter(transport, c)
    try:
        return await asyncio.to_thread(exporter.export, spans), tid
    finally:
        await asyncio.to_thread(exporter.shutdown)


async def _stored(c: Collector, tid: bytes) -> int:
    try:
        return len((await c.get_trace(tid)).spans)
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND
        return 0


# --- the SDK's exporters ------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", HEADER_VARIABLES)
@pytest.mark.parametrize("transport", ["grpc", "http"])
async def test_an_sdk_exporter_with_the_token_in_the_standard_headers_variable_stores_its_spans(
        start_collector, clean_otel_env, transport, variable):
    from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

    c = await _guarded(start_collector)
    # The specification's format: W3C Baggage, the value percent-encoded.
    clean_otel_env.setenv(variable, f"authorization=Bearer%20{TOKEN}")
    result, tid = await _sdk_export(transport, c, f"sre-{transport}")
    assert result is SpanExportResult.SUCCESS
    trace = await c.get_trace(tid)
    assert [s.name for s in trace.spans] == ["chat.turn", "tool.call"]
    assert trace.spans[0].service_name == f"sre-{transport}"


@pytest.mark.parametrize("transport", ["grpc", "http"])
async def test_an_sdk_exporter_with_a_wrong_or_no_token_fails_and_nothing_is_stored(
        start_collector, clean_otel_env, transport):
    from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

    c = await _guarded(start_collector)
    for header in (f"authorization=Bearer%20{WRONG}", None, f"authorization=Bearer%20{TOKEN}x",
                   f"authorization=Basic%20{TOKEN}"):
        if header is None:
            clean_otel_env.delenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", raising=False)
        else:
            clean_otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", header)
        t0 = time.monotonic()
        result, tid = await _sdk_export(transport, c, "intruder")
        assert result is SpanExportResult.FAILURE, header
        assert time.monotonic() - t0 < 5, "a refusal is final: the exporter must not retry it"
        assert await _stored(c, tid) == 0
    assert await c.span_rows() == 0
    samples = await scrape(c.server.metrics.port)
    assert value(samples, REFUSED, transport=transport, signal="traces", reason="invalid") == 2
    assert value(samples, REFUSED, transport=transport, signal="traces", reason="missing") == 2


# --- the wire answers -----------------------------------------------------------------------------------


async def test_grpc_refuses_traces_and_logs_with_unauthenticated_before_decoding_them(start_collector):
    c = await _guarded(start_collector)
    tid, spans = one_trace(3)
    body = request(spans).SerializeToString()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{c.ports['otlp_grpc']}") as ch:
        raw = ch.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        logs = logs_service_pb2_grpc.LogsServiceStub(ch)
        for md in ((), _bearer(WRONG), (("authorization", TOKEN),), (("authorization", f"Basic {TOKEN}"),),
                   _bearer("")):
            for call in (raw(body, metadata=md), raw(b"not a protobuf", metadata=md),
                         logs.Export(logs_service_pb2.ExportLogsServiceRequest(), metadata=md)):
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await call
                # Not INVALID_ARGUMENT for the garbage: the body was never decoded.
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, md
                assert e.value.code().value[0] == 16
                assert error_info(e.value).reason == "UNAUTHENTICATED"
                assert TOKEN not in (e.value.details() or "") and WRONG not in (e.value.details() or "")
        # Health and reflection stay open (probes carry no token).
        health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""))
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert await c.span_rows() == 0
        # The right token: the same calls are served as before (the garbage is INVALID_ARGUMENT again).
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await raw(b"not a protobuf", metadata=_bearer(TOKEN))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await logs.Export(logs_service_pb2.ExportLogsServiceRequest(), metadata=(("authorization", f"bearer {TOKEN}"),))
        ok = trace_service_pb2.ExportTraceServiceResponse.FromString(await raw(body, metadata=_bearer(TOKEN)))
        assert not ok.HasField("partial_success")
    assert len((await c.get_trace(tid)).spans) == 3
    samples = await scrape(c.server.metrics.port)
    assert value(samples, REFUSED, transport="grpc", signal="traces", reason="missing") == 8
    assert value(samples, REFUSED, transport="grpc", signal="traces", reason="invalid") == 2
    assert value(samples, REFUSED, transport="grpc", signal="logs") == 5
    # The RPC metrics see the refusals' status code too.
    assert value(samples, "rpc_server_duration_milliseconds_count", rpc_method="Export",
                 rpc_grpc_status_code="16") == 15


async def test_http_refuses_with_401_www_authenticate_and_a_status_in_the_request_content_type(start_collector):
    c = await _guarded(start_collector)
    tid, spans = one_trace(2)
    protobuf = request(spans).SerializeToString()
    as_json = json_format.MessageToJson(request(spans)).encode()
    logs_url = c.http_url.replace("/v1/traces", "/v1/logs")
    async with aiohttp.ClientSession() as http:
        for url in (c.http_url, logs_url):
            for auth, challenge in ((None, "Bearer"), (f"Bearer {WRONG}", 'Bearer error="invalid_token"'),
                                    (f"Basic {TOKEN}", "Bearer")):
                for ctype, body in (("application/x-protobuf", protobuf), ("application/json", as_json),
                                    ("text/plain", b"x" * (1024 * 1024))):
                    headers = {"Content-Type": ctype, **({"Authorization": auth} if auth else {})}
                    r = await http.post(url, data=body, headers=headers)
                    raw = await r.read()
                    assert r.status == 401, (url, auth, ctype, r.status)
                    assert r.headers["WWW-Authenticate"] == challenge
                    reply = "application/json" if ctype == "application/json" else "application/x-protobuf"
                    assert r.headers["Content-Type"] == reply
                    st = json_format.Parse(raw, status_pb2.Status()) if reply == "application/json" \
                        else status_pb2.Status.FromString(raw)
                    assert st.code == 16 and st.message, st
                    assert TOKEN.encode() not in raw and WRONG.encode() not in raw
                    assert all(TOKEN not in v and WRONG not in v for v in r.headers.values())
        assert await c.span_rows() == 0
        r = await http.post(c.http_url, data=protobuf,
                            headers={"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}"})
        assert r.status == 200
    assert len((await c.get_trace(tid)).spans) == 2
    samples = await scrape(c.server.metrics.port)
    assert value(samples, REFUSED, transport="http", signal="traces", reason="missing") == 6
    assert value(samples, REFUSED, transport="http", signal="logs", reason="invalid") == 3
    # Requests are counted, not their spans: the refused bodies were never decoded.
    assert value(samples, "otelcol_receiver_refused_spans_total", missing=0.0) == 0
    text = await _metrics_text(c)
    assert TOKEN not in text and WRONG not in text


async def _metrics_text(c: Collector) -> str:
    async with aiohttp.ClientSession() as http:
        r = await http.get(f"http://127.0.0.1:{c.server.metrics.port}/metrics")
        return await r.text()


# --- rotation, and no setting -------------------------------------------------------------------------


async def test_two_tokens_are_both_accepted_so_one_can_be_rotated_out(start_collector):
    c = await _guarded(start_collector, f" {TOKEN} , {OTHER},")
    stored = []
    async with aiohttp.ClientSession() as http:
        for token in (TOKEN, OTHER):
            tid, spans = one_trace(2)
            await c.otlp().Export(request(spans), metadata=_bearer(token))
            stored.append(tid)
            tid, spans = one_trace(2)
            r = await http.post(c.http_url, data=request(spans).SerializeToString(),
                                headers={"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"})
            assert r.status == 200
            stored.append(tid)
        r = await http.post(c.http_url, data=b"", headers={"Content-Type": "application/x-protobuf",
                                                            "Authorization": f"Bearer {WRONG}"})
        assert r.status == 401
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await c.otlp().Export(request(one_trace(1)[1]), metadata=_bearer(WRONG))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    for tid in stored:
        assert len((await c.get_trace(tid)).spans) == 2
    assert await c.span_rows() == 8


async def test_without_tokens_ingest_takes_exports_with_or_without_an_authorization(collector, clean_otel_env):
    from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

    for md in ((), _bearer(WRONG), (("authorization", "anything"),)):
        tid, spans = one_trace(2)
        assert not (await collector.otlp().Export(request(spans), metadata=md)).HasField("partial_success")
        assert len((await collector.get_trace(tid)).spans) == 2
    async with aiohttp.ClientSession() as http:
        for headers in ({}, {"Authorization": f"Bearer {WRONG}"}):
            tid, spans = one_trace(2)
            r = await http.post(collector.http_url, data=request(spans).SerializeToString(),
                                headers={"Content-Type": "application/x-protobuf", **headers})
            assert r.status == 200 and "WWW-Authenticate" not in r.headers
            assert len((await collector.get_trace(tid)).spans) == 2
    for transport in ("grpc", "http"):
        result, tid = await _sdk_export(transport, collector, "open")
        assert result is SpanExportResult.SUCCESS
        assert await _stored(collector, tid) == 2


# --- our own services' span export --------------------------------------------------------------------


@pytest.mark.parametrize(("protocol", "mode"), [("grpc", "process"), ("http/protobuf", "process"), ("grpc", "thread")])
async def test_our_services_span_export_sends_the_token_from_the_headers_variable(
        start_collector, clean_otel_env, tmp_path, protocol, mode):
    """A service's spans (telemetry.setup_tracing; the exporter built by telemetry.make_exporter from the
    OTEL_* environment, in the span export child — services.common.span_pipe → span_export_worker — or on
    a thread with AGENTFEEDBACK_SPAN_EXPORT=thread): with OTEL_EXPORTER_OTLP_HEADERS they reach a collector
    that takes that token; without it they are refused (the child keeps them in its spool)."""
    from services.common.telemetry import setup_tracing  # noqa: PLC0415

    c = await _guarded(start_collector)
    env = clean_otel_env
    env.setenv("AGENTFEEDBACK_SPAN_EXPORT", mode)
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
    if protocol == "grpc":
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{c.ports['otlp_grpc']}")
    else:
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.http_url)
    env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    env.setenv("AGENTFEEDBACK_SPAN_SPOOL_DIR", str(tmp_path / "spool"))
    transport = "grpc" if protocol == "grpc" else "http"

    async def one_turn(service: str, headers: str | None) -> bytes:
        if headers is None:
            env.delenv("OTEL_EXPORTER_OTLP_HEADERS", raising=False)
        else:
            env.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)
        tp = setup_tracing(service)
        try:
            tracer = tp.get_tracer("agentfeedback.test")
            with tracer.start_as_current_span("turn") as root, tracer.start_as_current_span("tool.call"):
                pass
            assert await asyncio.to_thread(tp.force_flush, 20_000)
        finally:
            await asyncio.to_thread(tp.shutdown)
        return root.get_span_context().trace_id.to_bytes(16, "big")

    tid = await one_turn("with-token", f"authorization=Bearer%20{TOKEN}")
    trace = await c.get_trace(tid)
    assert {s.name for s in trace.spans} == {"turn", "tool.call"}
    assert trace.spans[0].service_name == "with-token"

    tid = await one_turn("without-token", None)
    samples = await scrape(c.server.metrics.port)
    assert value(samples, REFUSED, transport=transport, signal="traces", reason="missing") >= 1
    assert await _stored(c, tid) == 0
    if mode == "process":
        assert list((tmp_path / "spool" / "without-token").iterdir()), "the refused batch is kept in the spool"
