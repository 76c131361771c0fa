"""The span export child's OTLP encoder (services.common.otlp_spans) writes, from the compacted spans
the pipe carries, the very ExportTraceServiceRequest the SDK's encoder builds from the spans the
parent ended: same bytes, over many span shapes (limits hit, links, remote parents, trace state,
scopes, every value type, statuses, values the SDK cannot encode)."""
from __future__ import annotations

import io
import logging

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from services.common.otlp_spans import RequestEncoder, encode_span
from services.common.span_pipe import compact, read_msg, write_msg
from services.common.telemetry import SPAN_LIMITS, record_exception


def _provider(mem: InMemorySpanExporter) -> TracerProvider:
    resource = Resource({"service.name": "chat", "service.namespace": "agentfeedback", "n": 3},
                        "https://opentelemetry.io/schemas/1.21.0")
    tp = TracerProvider(resource=resource, span_limits=SPAN_LIMITS)
    tp.add_span_processor(SimpleSpanProcessor(mem))
    return tp


def _many_shapes(tp: TracerProvider) -> None:
    chat = tp.get_tracer("services.chat")
    agent = tp.get_tracer("services.chat.agent", "1.2", schema_url="https://example.test/schema")
    scoped = tp.get_tracer("scoped", attributes={"scope.kind": "test", "scope.n": 2})
    caller = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                         trace_flags=TraceFlags(1), trace_state=TraceState([("vendor", "v1"), ("rojo", "00f0")]))
    # The chat turn's shape: a new trace, the caller's context as a link, events at set times.
    turn = chat.start_span("chat.turn", context=otel_context.Context(), kind=SpanKind.SERVER, start_time=1_700_000_000_000_000_000,
                           links=[Link(caller, {"link.why": "caller"})],
                           attributes={"chat.instance": "instances/abc", "rpc.system": "grpc", "chat.request_id": "r-1"})
    turn.set_attributes({"chat.turn_index": 0, "chat.user_message": "instances/abc/messages/1"})
    turn.add_event("chat.in", {"chat.message": "m", "chat.content_chars": 11, "chat.channel": "TEXT"},
                   timestamp=1_700_000_000_000_000_001)
    ctx = trace.set_span_in_context(turn)
    think = agent.start_span("agent.think", context=ctx, kind=SpanKind.SERVER, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "reference", "chat.turn_index": 0,
        "chat.user_message": "héllo ✓ 𝄞 there"})
    think.set_attributes({"gen_ai.response.model": "", "agent.tool_calls": 0, "agent.reply_chars": 1250})
    tool = agent.start_span("tool.call", context=trace.set_span_in_context(think), kind=SpanKind.CLIENT)
    tool.add_event("chat.truncated")
    tool.set_status(Status(StatusCode.ERROR, "tool failed"))
    tool.end()
    think.set_status(Status(StatusCode.OK))
    think.end()
    ws = chat.start_span("workspace.update", context=ctx, start_time=5, attributes={"workspace.artifact_id": 7})
    ws.end(9)
    turn.add_event("chat.out", {"chat.message": "m2", "gen_ai.response.model": "ref"})
    turn.end()
    # Every value type, and the limits hit: attributes, events, event and link attributes, long values.
    remote_parent = trace.set_span_in_context(NonRecordingSpan(caller))
    big = scoped.start_span("big", context=remote_parent, kind=SpanKind.PRODUCER,
                            links=[*[Link(caller) for _ in range(9)], Link(SpanContext(1, 2, is_remote=False)),
                                   Link(caller, {f"why{i}": "retry" for i in range(12)})],
                            attributes={f"k{i}": i for i in range(70)})
    big.set_attributes({"neg": -5, "zero": 0, "fzero": 0.0, "f": -1.25, "t": True, "fl": False, "empty": "",
                        "strs": ["a", "", "ü"], "ints": [1, -2, 0], "floats": [0.5], "bools": [True, False],
                        "none_list": [], "long": "x" * 3000, "int64max": 2**63 - 1, "int64min": -(2**63)})
    for i in range(20):
        big.add_event("chat.in", {"n": i, "f": 1.5, "ok": True})
    big.end()
    over = chat.start_span("attrs-over", kind=SpanKind.CONSUMER)
    over.add_event("big", {f"a{i}": i for i in range(12)})
    over.end(end_time=0)
    failed = chat.start_span("ünïcode name", kind=SpanKind.INTERNAL)
    try:
        raise ValueError("bad\nvalue")
    except ValueError as err:
        record_exception(failed, err)
    failed.set_status(Status(StatusCode.ERROR))
    failed.end()
    chat.start_span("", context=otel_context.Context()).end()


def _both(spans, resource: Resource) -> tuple[bytes, bytes]:
    """(the SDK's request bytes, ours from the compacted spans after the pipe's pickling)."""
    buf = io.BytesIO()
    write_msg(buf, ("spans", 1, [compact(s) for s in spans]))
    buf.seek(0)
    _kind, _seq, body = read_msg(buf)
    ours = RequestEncoder(dict(resource.attributes), resource.schema_url).request([(r[13], encode_span(r)) for r in body])
    return encode_spans(spans).SerializeToString(), ours


def test_our_request_is_the_sdk_encoders_byte_for_byte_over_many_span_shapes():
    mem = InMemorySpanExporter()
    tp = _provider(mem)
    _many_shapes(tp)
    spans = mem.get_finished_spans()
    big = next(s for s in spans if s.name == "big")
    assert big.dropped_attributes and big.dropped_events and big.dropped_links
    assert any(ln.dropped_attributes for ln in big.links)
    assert big.parent.is_remote and big.context.trace_state.get("rojo") == "00f0"
    sdk, ours = _both(spans, tp.resource)
    assert ours == sdk
    decoded = ExportTraceServiceRequest.FromString(ours)
    assert [len(s.spans) for s in decoded.resource_spans[0].scope_spans] == [2, 5, 1]  # agent, chat, scoped: first seen
    assert decoded.resource_spans[0].scope_spans[2].scope.attributes[0].key == "scope.kind"
    assert decoded == encode_spans(spans)
    for one in spans:  # and each span alone (one scope, one span per request)
        assert _both([one], tp.resource)[1] == _both([one], tp.resource)[0], one.name


def test_a_value_the_sdk_cannot_encode_is_left_out_as_the_sdk_does(caplog):
    mem = InMemorySpanExporter()
    tp = _provider(mem)
    span = tp.get_tracer("t").start_span("odd", attributes={"ok": 1, "huge": 2**64, "neg_huge": [-(2**63) - 1],
                                                              "surrogate": "a\ud800b"})
    span.end()
    with caplog.at_level(logging.ERROR):
        sdk, ours = _both(mem.get_finished_spans(), tp.resource)
    assert ours == sdk
    kept = [kv.key for kv in ExportTraceServiceRequest.FromString(ours).resource_spans[0].scope_spans[0].spans[0].attributes]
    assert kept == ["ok"]
    assert "Failed to encode key huge" in caplog.text


def test_a_batch_is_split_into_requests_within_the_limit_and_an_oversized_span_dropped(caplog):
    mem = InMemorySpanExporter()
    tp = _provider(mem)
    tracer = tp.get_tracer("t")
    for i in range(10):
        tracer.start_span(f"s{i}", attributes={"v": "x" * 1000}).end()
    tracer.start_span("huge", attributes={"v": ["y" * 2000] * 20}).end()  # arrays' items are not counted
    spans = mem.get_finished_spans()
    encoder = RequestEncoder(dict(tp.resource.attributes), tp.resource.schema_url)
    with caplog.at_level(logging.WARNING):
        requests = encoder.requests([compact(s) for s in spans], 30_000)
    assert "span huge" in caplog.text and "dropped" in caplog.text
    assert [r.spans for r in requests] == [10]
    requests = encoder.requests([compact(s) for s in spans[:10]], 3_500)
    assert [r.spans for r in requests] == [3, 3, 3, 1]
    got = [s for r in requests for s in ExportTraceServiceRequest.FromString(r.body).resource_spans[0].scope_spans[0].spans]
    assert [s.name for s in got] == [f"s{i}" for i in range(10)]
    assert all(len(r.body) < 3_500 + 200 for r in requests)


def test_the_http_exporter_posts_the_request_bytes_as_they_are(monkeypatch):
    """OTLP/HTTP (the child's exporter with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf) sends
    the encoded request unchanged, as a protobuf POST; a refusal is a failed export."""
    import http.server  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

    from services.common.otlp_spans import RawRequest  # noqa: PLC0415
    from services.common.telemetry import make_exporter  # noqa: PLC0415

    got: list[tuple[str, str, bytes]] = []
    answer = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            got.append((self.path, self.headers["Content-Type"], self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(answer[0])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{server.server_port}/v1/traces")
        for name in ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"):
            monkeypatch.delenv(name, raising=False)
        mem = InMemorySpanExporter()
        tp = _provider(mem)
        _many_shapes(tp)
        sdk, ours = _both(mem.get_finished_spans(), tp.resource)
        exporter = make_exporter(2.0, requests=True)
        assert exporter.export(RawRequest(ours, 8)) is SpanExportResult.SUCCESS
        assert got == [("/v1/traces", "application/x-protobuf", sdk)]
        answer[0] = 400  # not retryable: one attempt
        assert exporter.export(RawRequest(ours, 8)) is SpanExportResult.FAILURE
        exporter.shutdown()
    finally:
        server.shutdown()
