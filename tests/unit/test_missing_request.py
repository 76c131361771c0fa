"""A unary-request call without its request message (services/common/missing_request.py), on a real
grpc.aio server on loopback: INTERNAL "Half-closed without a request" at once; calls with a request,
both shapes of streaming handler (an async generator; grpc_health's Watch, a coroutine writing through
its context) answer as before. Through Envoy: tests/e2e/test_grpcweb_gateway.py."""
from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.common.missing_request import MISSING, MissingRequestInterceptor


async def _nothing():
    return
    yield


async def test_a_unary_request_never_sent_is_internal_at_once_and_a_sent_one_is_served():
    async def echo(request, context):
        return b"ok:" + request

    async def twice(request, context):
        yield request
        yield request

    server = grpc.aio.server(interceptors=[MissingRequestInterceptor()])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", {
        "Echo": grpc.unary_unary_rpc_method_handler(echo), "Twice": grpc.unary_stream_rpc_method_handler(twice)}),))
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert await ch.unary_unary("/t.S/Echo")(b"x", timeout=5) == b"ok:x"
            assert [m async for m in ch.unary_stream("/t.S/Twice")(b"y", timeout=5)] == [b"y", b"y"]
            await checks.set("", health_pb2.HealthCheckResponse.SERVING)
            watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=5)
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
            watch.cancel()
            for call in (ch.stream_unary("/t.S/Echo")(_nothing(), timeout=5),
                         ch.stream_stream("/t.S/Twice")(_nothing(), timeout=5),
                         ch.stream_stream("/grpc.health.v1.Health/Watch")(_nothing(), timeout=5)):
                try:
                    await asyncio.wait_for(call if isinstance(call, grpc.aio.StreamUnaryCall) else call.read(), 5)
                    raise AssertionError("answered without a request")
                except grpc.aio.AioRpcError as e:
                    assert (e.code(), e.details()) == (grpc.StatusCode.INTERNAL, MISSING)
    finally:
        await server.stop(0)
