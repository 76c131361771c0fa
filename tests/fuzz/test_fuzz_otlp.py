"""Raw bytes and bodies to the collector's OTLP/gRPC and OTLP/HTTP receivers (issue 16): an answer to
each (never a dropped connection), never a 5xx, only OK or INVALID_ARGUMENT over gRPC, a refused body
is one WARNING line (no ERROR traceback), and after every fuzzed input the same collector is SERVING
(health of its OTLP/gRPC and query ports) and its OTLP/HTTP receiver stores a valid export."""
from __future__ import annotations

import logging
import os

import grpc
import httpx
from google.rpc import status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.incidents import INCIDENTS
from services.tracecollector.otlp_http import CLIENT_ERRORS

EXAMPLES = int(os.environ.get("AGENTFEEDBACK_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TYPES = ["application/x-protobuf", "application/json", "text/plain", "", "application/x-protobuf; charset=utf-8"]
ENCODINGS = ["", "gzip", "deflate", "br", "zstd", "identity", "compress", "gzip, br", "x-gzip", "😀" * 50]
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


async def test_a_refused_content_encoding_is_answered_415_by_the_receiver_and_logs_nothing(stack, caplog):
    """`br` (which aiohttp's parser refused itself, a WARNING incident per burst) is the receiver's
    415 with a google.rpc.Status, like any coding it does not decode: an answer, not a log line."""
    caplog.set_level(logging.INFO)
    open_before = INCIDENTS.count(CLIENT_ERRORS)
    async with httpx.AsyncClient() as c:
        r = await c.post(f"http://127.0.0.1:{stack.ports['otlp_http']}/v1/traces", content=b"\x00garbage",
                         headers={"content-type": "application/x-protobuf", "content-encoding": "br"})
    assert r.status_code == 415 and "br" in status_pb2.Status.FromString(r.content).message
    assert INCIDENTS.count(CLIENT_ERRORS) == open_before
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING or rec.name.startswith("aiohttp")]


@FUZZ
@given(body=st.binary(max_size=4096), ctype=st.sampled_from(TYPES), coding=st.sampled_from(ENCODINGS),
       path=st.sampled_from(["/v1/traces", "/v1/logs"]))
async def test_otlp_http_never_answers_5xx(stack, body, ctype, coding, path):
    headers = {"content-type": ctype} if ctype else {}
    if coding:
        headers["content-encoding"] = coding.encode()  # bytes: a non-ASCII value goes on the wire as is
    async with httpx.AsyncClient() as c:
        r = await c.post(f"http://127.0.0.1:{stack.ports['otlp_http']}{path}", content=body, headers=headers)
    assert r.status_code < 500, (r.status_code, r.text[:200])
    await _assert_serving(stack)


@FUZZ
@given(method=st.sampled_from(["GET", "PUT", "DELETE", "PATCH", "POST"]),
       path=st.sampled_from(["/v1/traces", "/v1/metrics", "/v1/logs", "/", "/v1/traces/x"]),
       body=st.binary(max_size=2048), coding=st.sampled_from(ENCODINGS[:4]))
async def test_otlp_http_other_paths_and_methods_never_log_a_traceback(stack, caplog, method, path, body, coding):
    """Issue 25: an undecodable gzip body to /v1/metrics (404) or a GET /v1/traces (405) wrote an
    ERROR with a traceback per request."""
    caplog.clear()
    caplog.set_level(logging.INFO)
    headers = {"content-type": "application/x-protobuf", **({"content-encoding": coding} if coding else {})}
    async with httpx.AsyncClient() as c:
        r = await c.request(method, f"http://127.0.0.1:{stack.ports['otlp_http']}{path}", content=body, headers=headers)
    assert r.status_code < 500
    routes = ("/v1/traces", "/v1/logs")  # OTLP/HTTP's POST endpoints we serve (logs: evaluation events)
    if not (method == "POST" and path in routes):
        # aiohttp's parser may refuse a body its coding does not decode (400) before any route runs.
        assert r.status_code == (405 if path in routes else 404), (method, path, coding)
    assert not [rec for rec in caplog.records if rec.exc_info or rec.levelno >= logging.ERROR]
    await _assert_serving(stack)


@FUZZ
@given(body=st.binary(max_size=4096),
       method=st.sampled_from([EXPORT, "/opentelemetry.proto.collector.logs.v1.LogsService/Export"]))
async def test_otlp_grpc_never_answers_internal_or_unknown(stack, body, method):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.ports['otlp_grpc']}") as ch:
        call = ch.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        try:
            await call(body, timeout=10)
        except grpc.aio.AioRpcError as e:
            # UNAVAILABLE would be a dropped connection; INTERNAL / UNKNOWN an unhandled error.
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
    await _assert_serving(stack)


async def _assert_serving(stack) -> None:
    """The fuzzed collector itself still serves: health SERVING on its OTLP/gRPC and query ports, and an
    empty valid OTLP/HTTP export answered 200."""
    for port in ("otlp_grpc", "query"):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.ports[port]}") as ch:
            got = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert got.status == health_pb2.HealthCheckResponse.SERVING, port
    async with httpx.AsyncClient() as c:
        r = await c.post(f"http://127.0.0.1:{stack.ports['otlp_http']}/v1/traces", content=b"",
                         headers={"content-type": "application/x-protobuf"}, timeout=5)
    assert r.status_code == 200, (r.status_code, r.text[:200])
