"""Trace collector ingest over real OTLP/gRPC and OTLP/HTTP, real PostgreSQL, real OTel exporters.

Fixtures here (`collector`, `start_collector`) and the span builders are reused by
test_collector_query.py.
"""
from __future__ import annotations

import asyncio
import gzip
import json
import os
import time
import zlib

import aiohttp
import asyncpg
import grpc
import pytest
from agentfeedback.traces.v1 import traces_pb2
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from services.common.errors import error_info
from services.tracecollector.server import create_server
from services.tracecollector.settings import CollectorSettings
from tests.stack import TEST_JWT_SECRET
from tests.helpers.otlp import (
    Collector,
    grpc_retry_delay_s,
    kv,
    MIB,
    new_span_id,
    new_trace_id,
    NS,
    one_trace,
    request,
    span,
)


# --- tests -----------------------------------------------------------------------------------


async def test_F09_same_export_twice_in_a_row_and_twice_in_parallel_reads_five_spans(collector):
    tid, spans = one_trace(5)
    req = request(spans)
    stub = collector.otlp()
    for _ in range(2):
        resp = await stub.Export(req)
        assert not resp.HasField("partial_success")
    await asyncio.gather(stub.Export(req), stub.Export(req))
    trace = await collector.get_trace(tid)
    assert len(trace.spans) == 5
    assert sorted(s.span_id for s in trace.spans) == sorted(s.span_id.hex() for s in spans)
    # Every copy was stored (COPY appends); reads collapse them.
    assert await collector.span_rows() == 20


async def test_F14_bad_ids_rejected_through_partial_success_the_rest_stored(collector):
    tid, good = one_trace(5)
    bad = [
        span(bytes(16), new_span_id(), name="zero-trace-id"),
        span(tid, b"\x01\x02\x03", name="three-byte-span-id"),
        span(tid, b"", name="no-span-id"),
    ]
    resp = await collector.otlp().Export(request(good[:2] + bad + good[2:]))
    assert resp.partial_success.rejected_spans == 3
    msg = resp.partial_success.error_message
    assert "trace_id" in msg and "span_id" in msg, msg
    assert len((await collector.get_trace(tid)).spans) == 5
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await collector.query().GetTrace(traces_pb2.GetTraceRequest(trace_id="0" * 32), metadata=collector.md())
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await collector.span_rows() == 5


async def test_reversed_zero_and_out_of_window_times_rejected(collector):
    tid = new_trace_id()
    now = time.time_ns()
    ok = span(tid, new_span_id(), name="ok")
    reversed_ = span(tid, new_span_id(), start_ns=now - NS, duration_ns=-1000)
    zero = span(tid, new_span_id())
    zero.start_time_unix_nano = 0
    too_old = span(tid, new_span_id(), start_ns=now - 16 * 86_400 * NS)
    future = span(tid, new_span_id(), start_ns=now + 2 * 3600 * NS)
    resp = await collector.otlp().Export(request([ok, reversed_, zero, too_old, future]))
    assert resp.partial_success.rejected_spans == 4
    for word in ("before start", "zero", "older than the retention window", "future"):
        assert word in resp.partial_success.error_message
    assert [s.name for s in (await collector.get_trace(tid)).spans] == ["ok"]


async def test_F12_nul_in_span_attribute_is_stored_as_replacement_character(collector):
    tid = new_trace_id()
    s = span(tid, new_span_id(), name="na\x00me", attrs={"chat.content": "ok\x00bad", "k\x00": "v"})
    s.events.add(name="chat.in", time_unix_nano=s.start_time_unix_nano, attributes=[kv("x", "a\x00b")])
    resp = await collector.otlp().Export(request([s]))
    assert not resp.HasField("partial_success")
    got = (await collector.get_trace(tid)).spans[0]
    assert got.name == "na\ufffdme"
    assert got.attributes["chat.content"] == "ok\ufffdbad"
    assert got.attributes["k\ufffd"] == "v"
    assert got.events[0].attributes["x"] == "a\ufffdb"


async def test_empty_export_succeeds_over_grpc_and_http(collector):
    resp = await collector.otlp().Export(trace_service_pb2.ExportTraceServiceRequest())
    assert not resp.HasField("partial_success")
    async with aiohttp.ClientSession() as http:
        r = await http.post(collector.http_url, data=b"", headers={"Content-Type": "application/x-protobuf"})
        assert r.status == 200
        assert r.headers["Content-Type"] == "application/x-protobuf"
        assert not trace_service_pb2.ExportTraceServiceResponse.FromString(await r.read()).HasField("partial_success")


async def test_gzip_export_over_grpc(collector):
    tid, spans = one_trace(3)
    await collector.otlp(compression=grpc.Compression.Gzip).Export(request(spans))
    assert len((await collector.get_trace(tid)).spans) == 3


async def test_gzip_export_over_http_protobuf(collector):
    tid, spans = one_trace(3)
    body = gzip.compress(request(spans).SerializeToString())
    async with aiohttp.ClientSession() as http:
        r = await http.post(collector.http_url, data=body,
                            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
        assert r.status == 200, await r.text()
    assert len((await collector.get_trace(tid)).spans) == 3


def _padded_request(total_bytes: int) -> trace_service_pb2.ExportTraceServiceRequest:
    """One valid span whose request serializes to exactly `total_bytes`."""
    tid = new_trace_id()
    req = request([span(tid, new_span_id(), attrs={"pad": ""})])
    base = req.ByteSize()
    pad = total_bytes - base
    # The pad's length prefix grows with the pad: shrink until the total is exact.
    while True:
        req.resource_spans[0].scope_spans[0].spans[0].attributes[0].value.string_value = "x" * pad
        size = req.ByteSize()
        if size == total_bytes:
            return req
        pad -= size - total_bytes


async def test_grpc_message_of_4mib_plus_one_byte_is_rejected_and_nothing_stored(collector):
    stub = collector.otlp()
    too_big = _padded_request(4 * MIB + 1)
    assert too_big.ByteSize() == 4 * MIB + 1
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.Export(too_big)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Compressed it is tiny on the wire; the limit still applies after decompression.
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await collector.otlp(compression=grpc.Compression.Gzip).Export(too_big)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await collector.span_rows() == 0
    # At the limit it is accepted.
    ok = _padded_request(4 * MIB)
    await stub.Export(ok)
    assert await collector.span_rows() == 1


async def test_otlp_json_with_hex_ids_integer_enums_and_string_int64_is_accepted(collector):
    tid, sid, child = new_trace_id(), new_span_id(), new_span_id()
    start = time.time_ns() - 5 * NS
    doc = {
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
            "scopeSpans": [{
                "scope": {"name": "json-scope"},
                "spans": [
                    {"traceId": tid.hex().upper(), "spanId": sid.hex(), "name": "root", "kind": 2,
                     "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 2_000_000),
                     "attributes": [{"key": "http.status_code", "value": {"intValue": "200"}},
                                    {"key": "ok", "value": {"boolValue": True}}],
                     "status": {"code": 2, "message": "boom"}, "someFutureField": {"x": 1}},
                    {"traceId": tid.hex(), "spanId": child.hex(), "parentSpanId": sid.hex(), "name": "child",
                     "startTimeUnixNano": start + 1000, "endTimeUnixNano": start + 2000,
                     "links": [{"traceId": "ab" * 16, "spanId": "cd" * 8}]},
                    {"traceId": "not-hex", "spanId": sid.hex(), "name": "bad",
                     "startTimeUnixNano": str(start), "endTimeUnixNano": str(start)},
                ],
            }],
        }],
    }
    async with aiohttp.ClientSession() as http:
        r = await http.post(collector.http_url, data=json.dumps(doc), headers={"Content-Type": "application/json"})
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"] == "application/json"
        body = await r.json()
    assert body["partialSuccess"]["rejectedSpans"] == "1"
    assert "trace_id" in body["partialSuccess"]["errorMessage"]
    trace = await collector.get_trace(tid)
    root, ch = trace.spans
    assert (root.name, root.kind, root.status_code, root.status_message) == (
        "root", traces_pb2.SPAN_KIND_SERVER, traces_pb2.STATUS_CODE_ERROR, "boom")
    assert root.attributes["http.status_code"] == 200 and root.attributes["ok"] is True
    assert root.service_name == "json-svc" and root.scope_name == "json-scope"
    assert ch.parent_span_id == sid.hex()
    assert (ch.links[0].trace_id, ch.links[0].span_id) == ("ab" * 16, "cd" * 8)


async def test_http_rejects_undecodable_body_with_400_and_unknown_type_with_415(collector):
    async with aiohttp.ClientSession() as http:
        r = await http.post(collector.http_url, data=b"\xff\xff\xff", headers={"Content-Type": "application/x-protobuf"})
        assert r.status == 400
        assert status_pb2.Status.FromString(await r.read()).message
        r = await http.post(collector.http_url, data=b"{", headers={"Content-Type": "application/json"})
        assert r.status == 400
        r = await http.post(collector.http_url, data=b"x", headers={"Content-Type": "text/plain"})
        assert r.status == 415


async def test_an_unsupported_content_encoding_is_415_with_a_status_in_the_request_content_type(collector):
    """br and zstd (which aiohttp's parser refused itself with a plain-text 400), a list naming one
    of them, or any other coding: 415 Unsupported Media Type (RFC 9110 §15.5.16, the OTLP/HTTP
    receiver's docstring) with a google.rpc.Status in the request's Content-Type naming the coding,
    nothing stored; gzip and deflate still read."""
    tid, spans = one_trace(2)
    protobuf = request(spans).SerializeToString()
    as_json = json_format.MessageToJson(request(spans)).encode()
    async with aiohttp.ClientSession(auto_decompress=False) as http:
        for coding in ("br", "zstd", "gzip, br", "compress", "BR"):
            for ctype, body in (("application/x-protobuf", protobuf), ("application/json", as_json)):
                r = await http.post(collector.http_url, data=body,
                                    headers={"Content-Type": ctype, "Content-Encoding": coding})
                assert r.status == 415, (coding, ctype, r.status, (await r.read())[:80])
                assert r.headers["Content-Type"] == ctype, coding
                raw = await r.read()
                st = (json_format.Parse(raw, status_pb2.Status()) if ctype == "application/json"
                      else status_pb2.Status.FromString(raw))
                assert st.code == 3 and coding in st.message, (coding, st)
        assert await collector.span_rows() == 0
        for coding, body in (("gzip", gzip.compress(protobuf)), ("deflate", zlib.compress(protobuf)),
                             ("identity", protobuf)):
            r = await http.post(collector.http_url, data=body,
                                headers={"Content-Type": "application/x-protobuf", "Content-Encoding": coding})
            assert r.status == 200, coding
    assert len((await collector.get_trace(tid)).spans) == 2


async def test_http_body_over_the_limit_after_decompression_is_413(start_collector):
    c = await start_collector(http_max_body_bytes=64 * 1024)
    big = _padded_request(64 * 1024 + 1).SerializeToString()
    async with aiohttp.ClientSession() as http:
        r = await http.post(c.http_url, data=gzip.compress(big),
                            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
        assert r.status == 413
        r = await http.post(c.http_url, data=big, headers={"Content-Type": "application/x-protobuf"})
        assert r.status == 413
    assert await c.span_rows() == 0


async def test_backpressure_unavailable_with_retry_info_and_no_acknowledged_span_lost(start_collector):
    c = await start_collector(queue_max_spans=8, retry_after_s=2.0)
    stub = c.otlp()
    blocker = await asyncpg.connect(c.database_url)
    tid1, spans1 = one_trace(5)
    tid2, spans2 = one_trace(5)
    try:
        # Hold writers off: COPY needs ROW EXCLUSIVE, which SHARE conflicts with.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE traces.spans IN SHARE MODE")
        first = asyncio.ensure_future(stub.Export(request(spans1)))
        while c.server.writer.queued_spans < 5:
            await asyncio.sleep(0.01)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.Export(request(spans2))
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert grpc_retry_delay_s(e.value) == 2.0
        assert error_info(e.value).reason == "COLLECTOR_OVERLOADED"
        async with aiohttp.ClientSession() as http:
            r = await http.post(c.http_url, data=request(spans2).SerializeToString(),
                                headers={"Content-Type": "application/x-protobuf"})
            assert r.status == 503 and r.headers["Retry-After"] == "2"
        assert not first.done()  # not acknowledged before commit
        await tx.rollback()
        await first
    finally:
        await blocker.close()
    assert len((await c.get_trace(tid1)).spans) == 5
    await stub.Export(request(spans2))  # the retry the exporter makes
    assert len((await c.get_trace(tid2)).spans) == 5
    assert c.server.writer.queued_spans == 0


async def test_real_opentelemetry_exporters_grpc_and_http(collector):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = {
        "grpc": GrpcExporter(endpoint=f"127.0.0.1:{collector.ports['otlp_grpc']}", insecure=True,
                             compression=grpc.Compression.Gzip),
        "http": HttpExporter(endpoint=collector.http_url, compression=HttpCompression.Gzip),
    }
    for name, exporter in exporters.items():
        tp = TracerProvider(resource=Resource.create({"service.name": f"exp-{name}"}))
        tp.add_span_processor(BatchSpanProcessor(exporter))
        tracer = tp.get_tracer("test")
        with tracer.start_as_current_span("chat.turn") as root:
            root.add_event("chat.in", {"n": 1})
            with tracer.start_as_current_span("tool.call", attributes={"gen_ai.tool.name": "search"}):
                pass
        tid = root.get_span_context().trace_id.to_bytes(16, "big")
        # The SDK exports from its own thread (blocking I/O): keep the event loop serving meanwhile.
        assert await asyncio.to_thread(tp.force_flush, 10_000)
        trace = await collector.get_trace(tid)
        assert [s.name for s in trace.spans] == ["chat.turn", "tool.call"], name
        assert trace.spans[0].service_name == f"exp-{name}"
        assert trace.spans[0].events[0].name == "chat.in"
        assert trace.spans[1].parent_span_id == trace.spans[0].span_id
        assert trace.spans[1].attributes["gen_ai.tool.name"] == "search"
        await asyncio.to_thread(tp.shutdown)


async def test_forwarder_sends_accepted_spans_to_the_downstream_collector(start_collector, pg_url):
    # The downstream is a second real collector, on its own database.
    conn = await asyncpg.connect(pg_url)
    name = f"downstream_{os.getpid()}_{time.time_ns()}"
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    head, sep, query = pg_url.partition("?")
    down_url = f"{head.rsplit('/', 1)[0]}/{name}{sep}{query}"
    try:
        down = Collector(await create_server(CollectorSettings(
            otlp_grpc_listen="127.0.0.1:0", otlp_http_port=0, query_listen="127.0.0.1:0",
            jwt_secret=TEST_JWT_SECRET, shutdown_grace_s=0.5, shutdown_drain_s=0), database_url=down_url), down_url)
        try:
            up = await start_collector(forward_endpoint=f"127.0.0.1:{down.ports['otlp_grpc']}")
            tid, spans = one_trace(4)
            bad = span(bytes(16), new_span_id())
            resp = await up.otlp().Export(request(spans + [bad]))
            assert resp.partial_success.rejected_spans == 1
            for _ in range(200):
                if await down.span_rows() >= 4:
                    break
                await asyncio.sleep(0.02)
            assert len((await down.get_trace(tid)).spans) == 4
            assert await down.span_rows() == 4  # the rejected span was not forwarded
        finally:
            await down.close()
    finally:
        conn = await asyncpg.connect(pg_url)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


async def test_a_dead_downstream_never_slows_or_fails_ingest(start_collector):
    from tests.helpers.ports import closed_port

    with closed_port() as dead:  # nothing listens there (held, never listening)
        await _dead_downstream(start_collector, dead)


async def _dead_downstream(start_collector, dead: int) -> None:
    c = await start_collector(forward_endpoint=f"127.0.0.1:{dead}", forward_queue_max=2, forward_timeout_s=0.2)
    stub = c.otlp()
    t0 = time.perf_counter()
    for _ in range(6):
        _, spans = one_trace(2)
        resp = await stub.Export(request(spans))
        assert not resp.HasField("partial_success")
    assert time.perf_counter() - t0 < 2.0
    assert await c.span_rows() == 12
    assert c.server.forwarder.dropped >= 3  # bounded queue: the oldest requests were dropped


async def test_an_export_retried_after_a_client_deadline_reads_once(collector):
    # The exporter gives up waiting (deadline) while the COPY is held back; its spans still commit,
    # and the retry it then sends is stored again: reads show each span once.
    stub = collector.otlp()
    tid, spans = one_trace(5)
    blocker = await asyncpg.connect(collector.database_url)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE traces.spans IN SHARE MODE")
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.Export(request(spans), timeout=0.3)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        await tx.rollback()
    finally:
        await blocker.close()
    resp = await stub.Export(request(spans))
    assert not resp.HasField("partial_success")
    for _ in range(100):  # both copies are stored (the first one by another writer, maybe later)
        if await collector.span_rows() == 10:
            break
        await asyncio.sleep(0.02)
    assert await collector.span_rows() == 10
    assert len((await collector.get_trace(tid)).spans) == 5


async def test_http_malformed_bodies_are_400_with_a_status_message_never_500(collector):
    """Bad data is the client's fault (OTLP/HTTP: 400 + google.rpc.Status), whatever is wrong with it."""
    one_request = request(one_trace(20)[1]).SerializeToString()
    deep_value = '{"arrayValue":{"values":[' * 150 + '{"intValue":"1"}' + "]}}" * 150
    span_json = ('{"traceId":"%s","spanId":"%s","startTimeUnixNano":"1","endTimeUnixNano":"2",'
                 '"attributes":[%s]}')
    bodies = {
        "gzip header on a plain body": (b"notgzip", "application/json", "gzip"),
        "truncated gzip": (gzip.compress(one_request)[: len(gzip.compress(one_request)) // 2],
                           "application/x-protobuf", "gzip"),
        "deflate that is not deflate": (b"notdeflate", "application/x-protobuf", "deflate"),
        "deeply nested JSON array": (b"[" * 100_000 + b"]" * 100_000, "application/json", None),
        "deeply nested JSON object": (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "application/json", None),
        "AnyValue nested deeper than 100": (
            ('{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}'
             % span_json % ("ab" * 16, "cd" * 8, '{"key":"k","value":%s}' % deep_value)).encode(),
            "application/json", None),
        "int64 of 5000 digits": (
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":' + b"9" * 5000 + b"}]}]}]}",
            "application/json", None),
        "uint64 out of range": (
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"9' + b"9" * 22 + b'"}]}]}]}',
            "application/json", None),
        "wrong JSON types": (b'{"resourceSpans":[1,"x",null]}', "application/json", None),
        "a JSON array, not an object": (b"[]", "application/json", None),
        "truncated protobuf": (request([span(b"\x01" * 16, b"\x02" * 8)]).SerializeToString()[:-3],
                               "application/x-protobuf", None),
        "protobuf nested deeper than 100": (_deep_protobuf(150), "application/x-protobuf", None),
    }
    async with aiohttp.ClientSession(auto_decompress=False) as http:
        for what, (body, ctype, encoding) in bodies.items():
            headers = {"Content-Type": ctype}
            if encoding:
                headers["Content-Encoding"] = encoding
            r = await http.post(collector.http_url, data=body, headers=headers)
            assert r.status == 400, what
            raw = await r.read()
            st = (json_format.Parse(raw, status_pb2.Status()) if ctype == "application/json"
                  else status_pb2.Status.FromString(raw))
            assert st.code == 3 and st.message, what  # INVALID_ARGUMENT with a reason a person can act on
        # A coding aiohttp would not decode is refused, never read as a plain body.
        r = await http.post(collector.http_url, data=one_request,
                            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "compress"})
        assert r.status == 415 and status_pb2.Status.FromString(await r.read()).message
    assert await collector.span_rows() == 0
    # The listener still serves a good request afterwards.
    await collector.assert_http_stores_an_export()


async def test_grpc_export_of_an_undecodable_body_is_invalid_argument_and_nothing_stored(collector):
    """The public OTLP/gRPC Export (no token) answers a body that is not an ExportTraceServiceRequest
    with INVALID_ARGUMENT (never UNKNOWN), as OTLP/HTTP answers 400."""
    method = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{collector.ports['otlp_grpc']}") as ch:
        raw = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
        truncated = request([span(b"\x01" * 16, b"\x02" * 8)]).SerializeToString()[:-3]
        for garbage in (b"garbage", b"\n\x02\xc3(", truncated, _deep_protobuf(150)):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await raw(garbage)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, garbage[:20]
            assert error_info(e.value).reason == "UNDECODABLE_REQUEST"
        ok = await raw(request(one_trace(2)[1]).SerializeToString())
        assert not trace_service_pb2.ExportTraceServiceResponse.FromString(ok).HasField("partial_success")
    assert await collector.span_rows() == 2

def _deep_protobuf(depth: int) -> bytes:
    """An ExportTraceServiceRequest whose one attribute is an array nested `depth` levels."""
    v = common_pb2.AnyValue(int_value=1)
    body = v.SerializeToString()
    for _ in range(depth):  # AnyValue.array_value (5) → ArrayValue.values (1) → AnyValue
        arr = b"\x0a" + _varint(len(body)) + body
        body = b"\x2a" + _varint(len(arr)) + arr
    kv = b"\x0a\x01k" + b"\x12" + _varint(len(body)) + body
    sp = (b"\x0a\x10" + b"\x01" * 16 + b"\x12\x08" + b"\x02" * 8 + b"\x2a\x02op"
          + b"\x4a" + _varint(len(kv)) + kv)
    ss = b"\x12" + _varint(len(sp)) + sp
    rs = b"\x12" + _varint(len(ss)) + ss
    return b"\x0a" + _varint(len(rs)) + rs


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
