"""Helpers of the collector integration tests: OTLP spans and requests to export, a running collector
(fixtures `start_collector` / `collector`) with clients for it, RetryInfo of a refused export."""
from __future__ import annotations

import os
import time

import grpc
import pytest
from agentfeedback.traces.v1 import traces_pb2, traces_pb2_grpc
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from services.common.auth import mint_token
from services.common.errors import status_details
from services.tracecollector.server import create_server
from services.tracecollector.settings import CollectorSettings
from tests.stack import TEST_JWT_SECRET


NS = 1_000_000_000
MIB = 1024 * 1024


def new_trace_id() -> bytes:
    return os.urandom(16)


def new_span_id() -> bytes:
    return os.urandom(8)


def kv(key: str, value: object) -> common_pb2.KeyValue:
    v = common_pb2.AnyValue()
    if isinstance(value, bool):
        v.bool_value = value
    elif isinstance(value, int):
        v.int_value = value
    elif isinstance(value, float):
        v.double_value = value
    elif isinstance(value, bytes):
        v.bytes_value = value
    elif isinstance(value, list):
        v.array_value.values.extend(kv("", x).value for x in value)
    elif isinstance(value, dict):
        v.kvlist_value.values.extend(kv(k, x) for k, x in value.items())
    else:
        v.string_value = str(value)
    return common_pb2.KeyValue(key=key, value=v)


def span(trace_id: bytes, span_id: bytes, *, parent: bytes = b"", name: str = "op", start_ns: int | None = None,
         duration_ns: int = 1_000_000, attrs: dict | None = None, kind: int = trace_pb2.Span.SPAN_KIND_INTERNAL,
         **kw) -> trace_pb2.Span:
    start = time.time_ns() - 60 * NS if start_ns is None else start_ns
    return trace_pb2.Span(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=name, kind=kind,
        start_time_unix_nano=start, end_time_unix_nano=start + duration_ns,
        attributes=[kv(k, v) for k, v in (attrs or {}).items()], **kw,
    )


def request(spans: list[trace_pb2.Span], service: str = "svc-test") -> trace_service_pb2.ExportTraceServiceRequest:
    return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        resource=resource_pb2.Resource(attributes=[kv("service.name", service)]),
        scope_spans=[trace_pb2.ScopeSpans(scope=common_pb2.InstrumentationScope(name="tests"), spans=spans)],
    )])


def one_trace(n: int = 5, start_ns: int | None = None, **kw) -> tuple[bytes, list[trace_pb2.Span]]:
    """A trace of `n` spans: a root and n-1 children, 1 ms apart."""
    tid = new_trace_id()
    base = time.time_ns() - 60 * NS if start_ns is None else start_ns
    root = new_span_id()
    spans = [span(tid, root, name="root", start_ns=base, duration_ns=10_000_000, **kw)]
    spans += [span(tid, new_span_id(), parent=root, name=f"child-{i}", start_ns=base + (i + 1) * 1_000_000, **kw)
              for i in range(n - 1)]
    return tid, spans


def large_span(root: traces_pb2.Span, values: int = 8, name: str = "agent.retrieve") -> trace_pb2.Span:
    """A child of `root` (a span GetTrace answered, in its trace) 1 ms after its start, holding `values`
    incompressible attribute values of 16 KiB each (the collector's value length limit): with 8, 128 KiB
    that a GetTrace answer budget of 64 KiB must cut."""
    return span(bytes.fromhex(root.trace_id), new_span_id(), parent=bytes.fromhex(root.span_id), name=name,
                start_ns=root.start_time_unix_nano + 1_000_000,
                attrs={f"retrieval.document.{i}": os.urandom(8 * 1024).hex() for i in range(values)})


def bare_span(span: trace_pb2.Span) -> trace_pb2.Span:
    """A copy of `span` less its ids and times and its events' times (what two calls asking the same differ in)."""
    out = trace_pb2.Span()
    out.CopyFrom(span)
    for f in ("trace_id", "span_id", "parent_span_id", "start_time_unix_nano", "end_time_unix_nano"):
        out.ClearField(f)
    for e in out.events:
        e.ClearField("time_unix_nano")
    return out


class Collector:
    """A running collector plus clients for it."""

    def __init__(self, server, database_url: str):
        self.server = server
        self.database_url = database_url
        self.ports = server.ports
        self._channels: list[grpc.aio.Channel] = []

    def otlp(self, **channel_kw) -> trace_service_pb2_grpc.TraceServiceStub:
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{self.ports['otlp_grpc']}", **channel_kw)
        self._channels.append(ch)
        return trace_service_pb2_grpc.TraceServiceStub(ch)

    def query(self) -> traces_pb2_grpc.TraceQueryServiceStub:
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{self.ports['query']}")
        self._channels.append(ch)
        return traces_pb2_grpc.TraceQueryServiceStub(ch)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['otlp_http']}/v1/traces"

    def md(self, scopes: tuple[str, ...] = ("traces:read",)) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {mint_token(TEST_JWT_SECRET, 'sre', scopes)}"),)

    async def get_trace(self, trace_id: bytes, **kw) -> traces_pb2.Trace:
        return await self.query().GetTrace(traces_pb2.GetTraceRequest(trace_id=trace_id.hex(), **kw), metadata=self.md())

    async def span_rows(self) -> int:
        """Stored span rows (duplicates included), in whichever store the collector uses."""
        return await self.server.repo.span_count()

    async def assert_http_stores_an_export(self) -> None:
        """A valid two-span export over OTLP/HTTP is 200 and reads back (the listener still serves)."""
        import aiohttp  # noqa: PLC0415 - only the HTTP tests need it

        tid, spans = one_trace(2)
        async with aiohttp.ClientSession() as http:
            r = await http.post(self.http_url, data=request(spans).SerializeToString(),
                                headers={"Content-Type": "application/x-protobuf"})
            assert r.status == 200
        assert len((await self.get_trace(tid)).spans) == 2

    async def close(self) -> None:
        for ch in self._channels:
            await ch.close()
        await self.server.stop(0.5)


class Downstream(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC receiver keeping every span it is sent (the SREs' backend): `spans`, and `received`
    (resource, scope, span) per span, the resource and scope as their ResourceSpans / ScopeSpans carried
    them (schema url included, spans cleared)."""

    def __init__(self):
        self.spans: list[trace_pb2.Span] = []
        self.received: list[tuple[trace_pb2.ResourceSpans, trace_pb2.ScopeSpans, trace_pb2.Span]] = []

    async def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context):
        # Decoded by the OpenTelemetry proto (grpc did it with trace_service_pb2's deserializer).
        for rs in request.resource_spans:
            resource = trace_pb2.ResourceSpans(resource=rs.resource, schema_url=rs.schema_url)
            for ss in rs.scope_spans:
                scope = trace_pb2.ScopeSpans(scope=ss.scope, schema_url=ss.schema_url)
                self.spans.extend(ss.spans)
                self.received.extend((resource, scope, s) for s in ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()



async def start_downstream() -> tuple[Downstream, grpc.aio.Server, int]:
    """A started Downstream receiver on a free loopback port: (receiver, its server, port). The caller
    stops the server."""
    down = Downstream()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(down, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return down, server, port

@pytest.fixture
async def start_collector(database_url: str, tmp_path, collector_store):
    """`await start(clock=None, **settings)`: a collector on the test's span store (`span_store`)."""
    started: list[Collector] = []
    store_settings, store_kw = collector_store

    async def start(clock=None, **overrides) -> Collector:
        settings = CollectorSettings(
            otlp_grpc_listen="127.0.0.1:0", otlp_http_host="127.0.0.1", otlp_http_port=0,
            query_listen="127.0.0.1:0", jwt_secret=TEST_JWT_SECRET, data_dir=tmp_path, shutdown_grace_s=0.5, shutdown_drain_s=0,
            **{**store_settings, **overrides},
        )
        kw = {"clock": clock, **store_kw} if clock else dict(store_kw)
        c = Collector(await create_server(settings, database_url=database_url, **kw), database_url)
        started.append(c)
        return c

    yield start
    for c in reversed(started):
        await c.close()


@pytest.fixture
async def collector(start_collector) -> Collector:
    return await start_collector()


def grpc_retry_delay_s(err: grpc.aio.AioRpcError) -> float | None:
    for d in status_details(err):
        if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            ri = error_details_pb2.RetryInfo()
            d.Unpack(ri)
            return ri.retry_delay.ToNanoseconds() / NS
    return None


def ts(ns: int) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromNanoseconds(ns)
    return t
