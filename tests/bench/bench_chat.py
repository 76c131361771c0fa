"""Chat gateway overhead per turn (issue 5): `turn_overhead_p50_ms` / `turn_overhead_p99_ms`.

A turn's time through the gateway (client-observed SendMessage latency over loopback gRPC) minus
the agent's own time (its `agent.think` span duration), with a zero-think-time reference agent,
over 1000 sequential turns on one instance (after 50 warm-up turns). Real PostgreSQL, real gRPC,
the real OTel SDK (batch processors, in-memory exporters so no collector time is counted).
Target (issue 5): p50 ≤ 3 ms on the 2-core reference machine.
"""
from __future__ import annotations

import statistics
import time

import grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from services.chat.agent.server import create_server as create_agent
from services.chat.server import create_server as create_chat
from services.chat.settings import AgentSettings, ChatSettings
from services.common.auth import mint_token

HIST = 20
TURNS = 1000
WARMUP = 50
SECRET = "bench-secret-0123456789abcdef0123456789abcdef"


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(exp))
    return tp, exp


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def run(ctx) -> dict[str, float]:
    db = await ctx.new_database()
    common = {"jwt_secret": SECRET, "data_dir": ctx.tmp, "shutdown_grace_s": 0}
    agent_tp, agent_spans = _provider()
    chat_tp, chat_spans = _provider()
    agent = await create_agent(AgentSettings(listen="127.0.0.1:0", think_ms=0, **common), tracer_provider=agent_tp)
    chat = await create_chat(ChatSettings(listen="127.0.0.1:0", agent_target=f"127.0.0.1:{agent.port}", history_messages=HIST, **common),
                             database_url=db, tracer_provider=chat_tp)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{chat.port}")
    try:
        stub = chat_pb2_grpc.ChatServiceStub(channel)
        md = (("authorization", f"Bearer {mint_token(SECRET, 'bench')}"),)
        inst = await stub.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="bench")), metadata=md)
        client_ms: dict[str, float] = {}
        for i in range(WARMUP + TURNS):
            t0 = time.perf_counter()
            r = await stub.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content=f"hello there {i}"),
                                       metadata=md)
            if i >= WARMUP:
                client_ms[r.trace_id] = (time.perf_counter() - t0) * 1000
        agent_tp.force_flush()
        think_ms = {format(s.context.trace_id, "032x"): (s.end_time - s.start_time) / 1e6
                    for s in agent_spans.get_finished_spans() if s.name == "agent.think"}
        chat_tp.force_flush()
        turn_ms = {format(s.context.trace_id, "032x"): (s.end_time - s.start_time) / 1e6
                   for s in chat_spans.get_finished_spans() if s.name == "chat.turn"}
        overhead = [client_ms[t] - think_ms[t] for t in client_ms]
        total = list(client_ms.values())
        return {
            "turn_overhead_p50_ms": statistics.median(overhead),
            "turn_overhead_p99_ms": _pct(overhead, 0.99),
            "turn_total_p50_ms": statistics.median(total),
            "turn_agent_think_p50_ms": statistics.median(think_ms[t] for t in client_ms),
            # Inside the gateway only (its chat.turn span minus agent.think): no client-side gRPC cost.
            "turn_gateway_span_overhead_p50_ms": statistics.median(turn_ms[t] - think_ms[t] for t in client_ms),
        }
    finally:
        await channel.close()
        await chat.stop(0)
        await agent.stop(0)
        chat_tp.shutdown()
        agent_tp.shutdown()
