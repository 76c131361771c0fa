"""A unary request that never came is INTERNAL "Half-closed without a request" at once, not a hang.

grpc.aio's server reads a unary-request method's message with one receive; when the client half-closes
without sending one (a gRPC-web POST with an empty body through Envoy, a client that ends its request
stream unsent) the receive answers None, which grpc.aio takes for a call cancelled at its start: it
returns without sending a status, and the client waits for its deadline (300 s through Envoy). The
protocol makes a unary request exactly one message; gRPC's own answer to none is INTERNAL "Half-closed
without a request" (grpc-java `ServerCalls`), so we send that.

`MissingRequestInterceptor`, first in every server's list (`GrpcServer`), serves each unary-request
method (unary-unary, unary-stream) as its streaming-request twin that reads the one message itself. The
handler it wraps is the one every later interceptor built, so auth, quota and telemetry run on a call
with a request exactly as before; a call without one never reaches them (no span, no RPC metric: it
carries nothing to attribute).
"""
from __future__ import annotations

import inspect
from typing import Any

import grpc

MISSING = "Half-closed without a request"


async def _request(context: grpc.aio.ServicerContext) -> Any:
    request = await context.read()
    if request is grpc.aio.EOF:
        await context.abort(grpc.StatusCode.INTERNAL, MISSING)
    return request


def _wrap(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler | None:
    if handler.unary_unary:
        unary = handler.unary_unary

        async def one(_requests, context):
            return await unary(await _request(context), context)

        return grpc.stream_unary_rpc_method_handler(one, request_deserializer=handler.request_deserializer,
                                                    response_serializer=handler.response_serializer)
    if handler.unary_stream:
        stream = handler.unary_stream

        async def many(_requests, context):
            # Either shape of a grpc.aio streaming handler: an async generator (ours) or a coroutine
            # that writes through the context (grpc_health's Watch).
            out = stream(await _request(context), context)
            if inspect.isasyncgen(out):
                async for item in out:
                    await context.write(item)
            else:
                await out

        return grpc.stream_stream_rpc_method_handler(many, request_deserializer=handler.request_deserializer,
                                                     response_serializer=handler.response_serializer)
    return None


class MissingRequestInterceptor(grpc.aio.ServerInterceptor):
    """Unary-request methods answer INTERNAL `MISSING` when the client half-closes without a message.
    Place first in the server's list (it wraps the handler the later interceptors built)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[object, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming:
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = _wrap(handler)
        if wrapped is None:
            return handler
        self._wrapped[method] = (handler, wrapped)
        return wrapped
