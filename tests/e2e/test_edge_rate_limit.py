"""Envoy's local rate limit at the edge (issue 16): past the gateway's token bucket a native gRPC call
through Envoy is RESOURCE_EXHAUSTED and never reaches a service; calls around the gateway still work."""
from __future__ import annotations

import asyncio
import time

import grpc

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from services.cli.envoy import GatewayPorts, start_envoy


async def test_a_flood_past_the_gateways_bucket_is_resource_exhausted_at_the_edge(stack, tmp_path):
    ports = GatewayPorts(gateway=0, chat=stack.ports["chat"], feedback=stack.ports["feedback"],
                         traces=stack.ports["query"])
    # A burst of 5 and one token a minute: no refill can land among the 12 calls (checked below), so
    # exactly the first 5 pass, however slowly the machine sends them.
    started = time.monotonic()
    envoy = await asyncio.to_thread(start_envoy, ports, config_dir=tmp_path / "envoy", rate_limit_per_s=1 / 60,
                                    rate_limit_burst=5)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{envoy.port}") as ch:
            stub = chat_pb2_grpc.ChatServiceStub(ch)
            codes = []
            for _ in range(12):
                try:
                    await stub.ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md(), timeout=5)
                    codes.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as e:
                    codes.append(e.code())
        assert time.monotonic() - started < 60, "a refill may have landed: the calls took a minute"
        assert codes == [grpc.StatusCode.OK] * 5 + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 7, codes
        # The service itself is not limited: the same call straight to it succeeds.
        await stack.chat().ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md())
    finally:
        await asyncio.to_thread(envoy.stop)
