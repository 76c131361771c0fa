"""The whole stack started in-process for tests: real gRPC servers on loopback, real PostgreSQL,
the real OpenTelemetry SDK exporting over OTLP/gRPC to the real collector.

Each service module exposes `create_server(settings, *, database_url=..., tracer_provider=...)`
returning a started server object with `.port` (or `.ports`) and `async stop()`. Every listener of the
stack binds port 0 and the stack reads the port it got (`Stack.ports`), so two stacks, or a stack and
`make run`, never race for a port picked free earlier.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider

from agentfeedback.chat.v1 import chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from agentfeedback.traces.v1 import traces_pb2_grpc
from services.common.auth import ALL_SCOPES, mint_token
from services.common.reconnect import RECONNECT_OPTIONS
from services.common.server import client_channel
from services.common.telemetry import setup_tracing

TEST_JWT_SECRET = "test-secret-not-for-production-0123456789abcdef"


def no_default_metrics_ports() -> None:
    """Services this process starts (in-process or as children inheriting its environment) serve no
    Prometheus endpoint unless given a port: tests and benchmarks run beside `make run` and each other
    on one machine, and the defaults (946x) would collide (a bench's collector on 9463 stopped a
    `make run` started next to it)."""
    for svc in ("CHAT", "AGENT", "FEEDBACK", "COLLECTOR"):
        os.environ.setdefault(f"AGENTFEEDBACK_{svc}_METRICS_LISTEN", "")


class LateChannel:
    """A client channel whose target is known only after it is handed out: stubs are built on it at once,
    calls go to `client_channel(target)` (the channel production makes) from `connect(target)` on.
    The stack gives feedback this one for chat, since chat needs feedback's port to start and feedback
    chat's. Before `connect` a call fails UNAVAILABLE, as a call to a peer still starting would."""

    def __init__(self) -> None:
        self._channel: grpc.aio.Channel | None = None
        self._old: list[grpc.aio.Channel] = []

    def connect(self, target: str) -> None:
        """Calls go to `target` from now on (again: a peer restarted on another port)."""
        if self._channel is not None:
            self._old.append(self._channel)
        self._channel = client_channel(target)

    def _callable(self, kind: str, method: str, *args: Any, **kwargs: Any):
        made = None
        made_on = None

        def call(*a: Any, **kw: Any):
            nonlocal made, made_on
            if made is None or made_on is not self._channel:
                if self._channel is None:
                    raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                               f"{method}: the target is not known yet")
                made, made_on = getattr(self._channel, kind)(method, *args, **kwargs), self._channel
            return made(*a, **kw)

        return call

    def unary_unary(self, method: str, *args: Any, **kwargs: Any):
        return self._callable("unary_unary", method, *args, **kwargs)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any):
        return self._callable("unary_stream", method, *args, **kwargs)

    async def close(self) -> None:
        for ch in [*self._old, *([self._channel] if self._channel is not None else [])]:
            await ch.close()


@dataclass
class Stack:
    """Handles to a running stack. `token(sub, scopes)` mints a bearer token the services accept."""

    ports: dict[str, int]
    data_dir: Path
    database_url: str
    providers: dict[str, TracerProvider] = field(default_factory=dict)
    servers: dict[str, Any] = field(default_factory=dict)
    channels: list[grpc.aio.Channel] = field(default_factory=list)
    # Channels handed to a server before their peer's port was known (feedback → chat, collector → feedback).
    late: dict[str, LateChannel] = field(default_factory=dict)

    def token(self, sub: str = "alice", scopes: tuple[str, ...] = ALL_SCOPES) -> str:
        return mint_token(TEST_JWT_SECRET, sub, scopes)

    def md(self, sub: str = "alice", scopes: tuple[str, ...] = ALL_SCOPES) -> tuple[tuple[str, str], ...]:
        """gRPC metadata carrying a token for `sub`."""
        return (("authorization", f"Bearer {self.token(sub, scopes)}"),)

    def channel(self, name: str) -> grpc.aio.Channel:
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{self.ports[name]}")
        self.channels.append(ch)
        return ch

    def chat(self) -> chat_pb2_grpc.ChatServiceStub:
        return chat_pb2_grpc.ChatServiceStub(self.channel("chat"))

    def feedback(self) -> feedback_pb2_grpc.FeedbackServiceStub:
        return feedback_pb2_grpc.FeedbackServiceStub(self.channel("feedback"))

    def traces(self) -> traces_pb2_grpc.TraceQueryServiceStub:
        return traces_pb2_grpc.TraceQueryServiceStub(self.channel("query"))

    def metrics_port(self, name: str) -> int:
        """The Prometheus endpoint port of service `name` (chat, agent, feedback, collector)."""
        return self.servers[name].metrics.port

    def flush_spans(self) -> None:
        """Export every finished span of every service now (BatchSpanProcessor.force_flush)."""
        for p in self.providers.values():
            p.force_flush(10_000)

    async def aflush_spans(self) -> None:
        """`flush_spans` off the event loop: the in-process collector must keep serving while it runs."""
        await asyncio.to_thread(self.flush_spans)

    async def wait_trace(self, trace_id: str, min_spans: int = 1, timeout_s: float = 10.0):
        """Flush, then poll GetTrace until the trace has at least `min_spans` spans."""
        from agentfeedback.traces.v1 import traces_pb2  # noqa: PLC0415

        await self.aflush_spans()
        stub = self.traces()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            try:
                t = await stub.GetTrace(traces_pb2.GetTraceRequest(trace_id=trace_id), metadata=self.md())
                if len(t.spans) >= min_spans:
                    return t
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    raise
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"trace {trace_id} did not reach {min_spans} spans in {timeout_s}s")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        # Export what is pending while the collector still runs (a provider shut down after the
        # collector stopped retries against a dead endpoint for seconds).
        await self.aflush_spans()
        for ch in self.channels:
            await ch.close()
        for name in ("chat", "agent", "feedback", "collector"):
            srv = self.servers.get(name)
            if srv is not None:
                await srv.stop(0.5)
        for p in self.providers.values():
            p.shutdown()


async def start_stack(database_url: str, data_dir: Path, agent_think_ms: int = 0,
                      collector_kw: dict[str, Any] | None = None, feedback_kw: dict[str, Any] | None = None,
                      **overrides: Any) -> Stack:
    """Start collector, agent, chat gateway and feedback on loopback against `database_url`; `.ports` holds
    the ports they got (`otlp_grpc`, `otlp_http`, `query`, `agent`, `chat`, `feedback`, `metrics_<service>`).
    `overrides`: per service (`collector`, `agent`, `chat`, `feedback`) settings fields to replace;
    `collector_kw`: extra keyword arguments of the collector's create_server (its `span_transport`);
    `feedback_kw`: of feedback's (its `webhook_resolver`)."""
    from services.chat.agent.server import create_server as create_agent
    from services.chat.server import create_server as create_chat
    from services.chat.agent.settings import AgentSettings
    from services.chat.settings import ChatSettings
    from services.feedback.server import create_server as create_feedback
    from services.feedback.settings import FeedbackSettings
    from services.tracecollector.server import create_server as create_collector
    from services.tracecollector.settings import CollectorSettings

    # Every listener binds port 0 and the stack reads the port it got (no bind-release-rebind race), in
    # dependency order: the collector (the others export spans to it, feedback queries it), feedback, the
    # agent (needs feedback), chat (needs the agent and feedback). Feedback needs chat too: its chat
    # channel is a LateChannel, connected once chat has its port (gRPC channels connect lazily anyway).
    p: dict[str, int] = {}
    common = {"database_url": database_url, "data_dir": data_dir, "jwt_secret": TEST_JWT_SECRET, "shutdown_grace_s": 0.5,
              "shutdown_drain_s": 0.0}
    any_port = "127.0.0.1:0"
    stack = Stack(ports=p, data_dir=data_dir, database_url=database_url)

    def provider(name: str) -> TracerProvider:
        tp = setup_tracing(name, exporter=OTLPSpanExporter(endpoint=f"127.0.0.1:{p['otlp_grpc']}", insecure=True,
                                                           channel_options=tuple(RECONNECT_OPTIONS)))
        stack.providers[name] = tp
        return tp

    def bound(name: str, server: Any) -> Any:
        stack.servers[name] = server
        p[f"metrics_{name}"] = server.metrics.port
        return server

    collector_settings = CollectorSettings(
        otlp_grpc_listen=any_port, otlp_http_host="127.0.0.1", otlp_http_port=0, query_listen=any_port,
        metrics_listen=any_port, **common, **overrides.get("collector", {}),
    )
    # The collector hands the evaluations other systems send to feedback (issue 24): a LateChannel too.
    to_feedback = stack.late["feedback"] = LateChannel()
    collector_kw = {"feedback_channel": to_feedback, **(collector_kw or {})}
    collector = bound("collector", await create_collector(collector_settings, database_url=database_url,
                                                          **collector_kw))
    p.update(collector.ports)  # otlp_grpc, otlp_http, query
    to_chat = LateChannel()
    feedback_settings = FeedbackSettings(**{
        "listen": any_port, "metrics_listen": any_port, "chat_target": "127.0.0.1:0",  # to_chat replaces it
        "traces_target": f"127.0.0.1:{p['query']}", "capture_poll_s": 0.2, "capture_backoff_s": 0.2,
        "tracker_markdown_dir": str(data_dir / "tickets"), **common, **overrides.get("feedback", {}),
    })
    p["feedback"] = bound("feedback", await create_feedback(
        feedback_settings, database_url=database_url, tracer_provider=provider("feedback"), chat_channel=to_chat,
        **(feedback_kw or {}))).port
    to_feedback.connect(f"127.0.0.1:{p['feedback']}")
    agent_settings = AgentSettings(
        listen=any_port, metrics_listen=any_port, feedback_target=f"127.0.0.1:{p['feedback']}", think_ms=agent_think_ms,
        **common, **overrides.get("agent", {}),
    )
    p["agent"] = bound("agent", await create_agent(agent_settings, tracer_provider=provider("agent"))).port
    chat_settings = ChatSettings(
        listen=any_port, metrics_listen=any_port, agent_target=f"127.0.0.1:{p['agent']}",
        feedback_target=f"127.0.0.1:{p['feedback']}", **common, **overrides.get("chat", {}),
    )
    p["chat"] = bound("chat", await create_chat(chat_settings, database_url=database_url,
                                                tracer_provider=provider("chat"))).port
    to_chat.connect(f"127.0.0.1:{p['chat']}")
    return stack


async def all_pages(rpc, request, items: str, metadata) -> list:
    """Every item of a paged List RPC: `rpc(request)` again with each `next_page_token`."""
    out: list = []
    while True:
        page = await rpc(request, metadata=metadata)
        out += getattr(page, items)
        if not page.next_page_token:
            return out
        request.page_token = page.next_page_token


async def new_conversation(stack: Stack, turns: int = 1, sub: str = "alice") -> tuple[str, list]:
    """A new instance of `sub` (reference agent) with `turns` turns: (its name, the SendMessage answers)."""
    import uuid  # noqa: PLC0415

    from agentfeedback.chat.v1 import chat_pb2  # noqa: PLC0415

    inst = await stack.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Agent", agent="reference")), metadata=stack.md(sub))
    sent = [await stack.chat().SendMessage(chat_pb2.SendMessageRequest(
        instance=inst.name, content=f"question {i}: what is {i} + {i}?", request_id=str(uuid.uuid4())),
        metadata=stack.md(sub)) for i in range(turns)]
    return inst.name, sent
