"""Chat gateway wiring: migrations, pool, agent channel, servicer, interceptor; nothing else.

`create_server(settings, database_url=..., tracer_provider=...)` follows the service contract
(preamble / tests/stack.py): applies `services/chat/migrations` to schema `chat`, creates the pool and
the agent channel once, binds `settings.listen` (port 0 allowed), starts, returns the GrpcServer.
Stop order: NOT_SERVING → drain → removal relay stops → agent and feedback channels close → pool close →
span flush.
"""

from __future__ import annotations

from pathlib import Path

from agentfeedback.chat.v1 import chat_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider

from services.chat import retries
from services.chat.agent_client import AgentClient
from services.chat.fork import Forker
from services.chat.ratings_client import RatingsClient
from services.chat.removal import RemovalRelay, TurnRemover
from services.chat.liveness import ProcessLock
from services.chat.repository import Repository
from services.chat.servicer import METHOD_SCOPES, SERVICE, UNTRACED_METHODS, ChatServicer, request_checks
from services.chat.settings import ChatSettings
from services.chat.turn import TurnRunner
from services.chat.workspace_store import WorkspaceStore
from services.common.auth import SCOPE_FEEDBACK_TURN_REMOVAL, Authenticator, ServiceToken
from services.common.db import close_pool, create_pool, migrate, resolve_database_url, skip_reset
from services.common.quota import write_quota_interceptor
from services.common.metrics import RpcMetrics, ServiceMetrics, pool_gauges
from services.common.server import GrpcServer, ServiceInterceptor, client_channel
from services.common.span_pipe import span_export_metrics
from services.common.telemetry import setup_tracing

MIGRATIONS = Path(__file__).parent / "migrations"
SCHEMA = "chat"
# The `sub` of this service's own credential (NoteTurnsRemoved).
CHAT_SERVICE_SUB = "svc:chat"
# Counted by the per-owner write quota (services/common/quota.py).
WRITE_METHODS = ("CreateInstance", "SendMessage", "StreamMessage", "ForkConversation")


async def create_server(
    settings: ChatSettings, *, database_url: str | None = None, tracer_provider: TracerProvider | None = None
) -> GrpcServer:
    """A started ChatService server. Raises OSError when `settings.listen` cannot be bound and
    asyncpg/OSError errors when PostgreSQL cannot be reached."""
    url = database_url or resolve_database_url(settings)
    await migrate(url, SCHEMA, MIGRATIONS)
    own_provider = tracer_provider is None
    provider = tracer_provider or setup_tracing("chat")
    tracer = provider.get_tracer("services.chat")
    # The chat service never changes session state, so connections skip asyncpg's reset round trip.
    pool = await create_pool(url, SCHEMA, settings.db_pool_min, settings.db_pool_max, reset=skip_reset,
                             command_timeout_s=settings.db_command_timeout_s)
    channel = client_channel(settings.agent_target)
    feedback_channel = client_channel(settings.feedback_target)
    metrics = await ServiceMetrics("chat", settings.metrics_listen).start()
    pool_gauges(metrics.meter, pool, SCHEMA)
    span_export_metrics(metrics.meter, provider)
    owner_lock = await ProcessLock.hold(url)  # before serving: every attempt this process begins names it
    repo = Repository(pool, owner_lock.key)
    workspace = WorkspaceStore(pool)
    turns = TurnRunner(
        repo, AgentClient(channel), tracer, settings.agent_timeout_cap_s, settings.history_messages,
        meter=metrics.meter, stale_margin_s=settings.turn_stale_margin_s, workspace=workspace,
    )
    interceptor = ServiceInterceptor(
        Authenticator(settings), METHOD_SCOPES, tracer, untraced=UNTRACED_METHODS, metrics=RpcMetrics(metrics)
    )
    quota = await write_quota_interceptor(url, pool, settings.write_quota_per_minute, SERVICE, WRITE_METHODS,
                                          answered=retries.answered_checks(repo, turns), burst=settings.write_quota_burst,
                                          valid=request_checks(settings.max_content_chars))
    ratings = RatingsClient(feedback_channel)
    token = ServiceToken(settings, settings.feedback_token.get_secret_value(), CHAT_SERVICE_SUB,
                         (SCOPE_FEEDBACK_TURN_REMOVAL,))
    remover = TurnRemover(repo, ratings, token, exit_after_commit=settings.test_exit_after_removal_commit)
    relay = RemovalRelay(repo, remover, settings.removal_relay_poll_s, metrics.meter)
    server = GrpcServer([interceptor, quota], grace_s=settings.shutdown_grace_s, drain_delay_s=settings.shutdown_drain_s)
    server.metrics = metrics
    server.metrics_refresh = relay.refresh  # type: ignore[attr-defined] - tests read the outbox gauges now
    server.watch_database(url)
    server.add(
        chat_pb2_grpc.add_ChatServiceServicer_to_server,
        ChatServicer(repo, turns, settings.max_content_chars, Forker(repo, ratings), workspace, remover),
        SERVICE,
    )
    server.bind(settings.listen)

    async def close_channel() -> None:
        await channel.close()
        await feedback_channel.close()

    async def close_database() -> None:
        await close_pool(pool)

    server.on_stop(relay.close)
    server.on_stop(close_channel)
    server.on_stop(owner_lock.close)
    server.on_stop(close_database)
    server.on_stop(metrics.close)
    if own_provider:

        async def flush() -> None:
            provider.shutdown()

        server.on_stop(flush)
    await server.start()
    relay.start()  # removals a killed or cut-off process left in the outbox are sent from now on
    return server
