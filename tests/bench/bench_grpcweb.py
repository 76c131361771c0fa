"""gRPC-web gateway overhead: unary GetFeedback through Envoy (gRPC-web binary, HTTP/1.1 keep-alive,
as a browser sends it) against the same call over native gRPC straight to the feedback service, same
stack, same row, same run.

Figures (milliseconds, median of 1000 sequential calls each, interleaved in blocks of 100 so drift
hits both paths alike, after a warm-up):
- `grpcweb_overhead_p50_ms`   = p50(gRPC-web via Envoy) − p50(direct gRPC)   (the issue's figure)
- `grpcweb_p50_ms`, `grpcweb_direct_grpc_p50_ms`: the two medians
- `grpcweb_envoy_native_grpc_p50_ms`: native gRPC through the same Envoy (the proxy hop alone,
  without the gRPC-web translation and the HTTP/1.1 client)
"""
from __future__ import annotations

import asyncio
import statistics
import time
import uuid

import grpc
import httpx

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2, feedback_pb2_grpc
from tests.helpers.grpcweb import FEEDBACK, call, envoy_for
from tests.stack import start_stack

CALLS = 1000
BLOCK = 100
WARMUP = 50
SMOKE = {"CALLS": 20, "BLOCK": 10, "WARMUP": 2}


async def run(ctx) -> dict[str, float]:
    db = await ctx.new_database()
    stack = await start_stack(db, ctx.tmp / "grpcweb-stack", feedback={"write_quota_per_minute": 10**9},
                              chat={"write_quota_per_minute": 10**9})
    envoy = None
    try:
        chat = stack.chat()
        inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="Bench", agent="reference"), request_id=str(uuid.uuid4())),
            metadata=stack.md())
        turn = await chat.SendMessage(chat_pb2.SendMessageRequest(
            instance=inst.name, content="How many agents do you have in total?", channel=chat_pb2.CHANNEL_TEXT,
            request_id=str(uuid.uuid4())), metadata=stack.md())
        fb = await stack.feedback().CreateFeedback(feedback_pb2.CreateFeedbackRequest(
            feedback=feedback_pb2.Feedback(message=turn.reply.name, body="bench row"),
            request_id=str(uuid.uuid4())), metadata=stack.md())
        req = feedback_pb2.GetFeedbackRequest(name=fb.name)
        envoy = await asyncio.to_thread(envoy_for, stack, ctx.tmp / "grpcweb-envoy")
        token, md = stack.token(), stack.md()

        direct = stack.feedback()
        via_envoy_ch = grpc.aio.insecure_channel(f"127.0.0.1:{envoy.port}")
        via_envoy = feedback_pb2_grpc.FeedbackServiceStub(via_envoy_ch)
        async with httpx.AsyncClient() as web:
            async def web_call() -> None:
                r = await call(web, envoy.url, FEEDBACK + "GetFeedback", req, token=token)
                if r.grpc_status != 0:
                    raise RuntimeError(f"gRPC-web GetFeedback failed: {r.grpc_status} {r.grpc_message}")

            async def direct_call() -> None:
                await direct.GetFeedback(req, metadata=md)

            async def native_envoy_call() -> None:
                await via_envoy.GetFeedback(req, metadata=md)

            paths = {"web": web_call, "direct": direct_call, "native_envoy": native_envoy_call}
            for fn in paths.values():
                for _ in range(WARMUP):
                    await fn()
            samples: dict[str, list[float]] = {k: [] for k in paths}
            for _ in range(CALLS // BLOCK):
                for name, fn in paths.items():
                    for _ in range(BLOCK):
                        t0 = time.perf_counter()
                        await fn()
                        samples[name].append((time.perf_counter() - t0) * 1000)
        await via_envoy_ch.close()
        p50 = {k: statistics.median(v) for k, v in samples.items()}
        return {
            "grpcweb_overhead_p50_ms": p50["web"] - p50["direct"],
            "grpcweb_p50_ms": p50["web"],
            "grpcweb_direct_grpc_p50_ms": p50["direct"],
            "grpcweb_envoy_native_grpc_p50_ms": p50["native_envoy"],
        }
    finally:
        if envoy is not None:
            await asyncio.to_thread(envoy.stop)
        await stack.stop()
