"""Reference agent wiring: tools, replay data (lazy), the feedback channel, servicer, interceptor.

`create_server(settings, *, tracer_provider=None)` binds `settings.listen` (port 0 allowed), starts,
and returns the GrpcServer. No database: `write_memory` is in-process. The ShareGPT data is read on
the first turn that needs it (off the event loop), once per process.
"""

from __future__ import annotations

import asyncio

from agentfeedback.agent.v1 import agent_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider

from services.chat.agent.feedback_client import FeedbackClient
from services.chat.agent.openai_backend import OpenAIBackend
from services.chat.agent.reference import ReferenceAgent
from services.chat.agent.replay import LazyReplay
from services.chat.agent.servicer import METHOD_SCOPES, SERVICE, UNTRACED_METHODS, AgentServicer, TurnLimits
from services.chat.agent.tools import MemoryStore, build_registry
from services.chat.agent.settings import AgentSettings
from services.common.auth import SCOPE_FEEDBACK_AGENT, Authenticator, ServiceToken
from services.common.metrics import RpcMetrics, ServiceMetrics
from services.common.server import GrpcServer, ServiceInterceptor, client_channel
from services.common.span_pipe import span_export_metrics
from services.common.telemetry import setup_tracing

# The agent's own identity towards the feedback service (its `x-agentfeedback-actor` credential).
AGENT_SERVICE_SUB = "svc:agent"


async def create_server(
    settings: AgentSettings, *, database_url: str | None = None, tracer_provider: TracerProvider | None = None
) -> GrpcServer:
    """A started AgentService server (`database_url` is accepted for the common contract and unused)."""
    own_provider = tracer_provider is None
    provider = tracer_provider or setup_tracing("agent")
    tracer = provider.get_tracer("services.chat.agent")
    feedback_channel = client_channel(settings.feedback_target)
    memory = MemoryStore()
    replay = LazyReplay(settings.replay_conversations)
    registry = build_registry(
        tracer,
        settings.tool_result_max_bytes,
        replay,
        FeedbackClient(
            feedback_channel,
            ServiceToken(settings, settings.service_token.get_secret_value(), AGENT_SERVICE_SUB, (SCOPE_FEEDBACK_AGENT,)),
        ),
        memory,
        asyncio.to_thread,
    )
    backend = None
    if settings.openai_base_url and settings.openai_model:
        backend = OpenAIBackend(settings.openai_base_url, settings.openai_model, settings.openai_api_key.get_secret_value())
    agent = ReferenceAgent(tracer, registry, memory, settings.think_ms, backend)
    metrics = await ServiceMetrics("agent", settings.metrics_listen).start()
    span_export_metrics(metrics.meter, provider)
    interceptor = ServiceInterceptor(
        Authenticator(settings), METHOD_SCOPES, tracer, untraced=UNTRACED_METHODS, metrics=RpcMetrics(metrics)
    )
    server = GrpcServer([interceptor], grace_s=settings.shutdown_grace_s, drain_delay_s=settings.shutdown_drain_s)
    server.metrics = metrics
    server.add(agent_pb2_grpc.add_AgentServiceServicer_to_server, AgentServicer(agent, TurnLimits(settings.max_content_chars, settings.max_history_messages)), SERVICE)
    server.bind(settings.listen)

    async def close() -> None:
        await feedback_channel.close()
        if backend is not None:
            await backend.aclose()
        if own_provider:
            provider.shutdown()
        await metrics.close()

    server.on_stop(close)
    await server.start()
    return server
