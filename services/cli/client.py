"""Client-side connection settings and stubs for the CLI, the demo and the MCP server.

Targets and the token come from `AGENTFEEDBACK_CLIENT_*` (or flags): `chat_target`,
`feedback_target`, `traces_target`, `token`. With no token, a dev token for `sub` (default
`owner`) is minted from the embedded HS256 secret in `<data_dir>/jwt-secret` — the same secret the
local services use, so the CLI just works against `make run`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import grpc
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from agentfeedback.chat.v1 import chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from agentfeedback.traces.v1 import traces_pb2_grpc
from services.common.auth import ACTOR_METADATA, DEV_SCOPES, SCOPE_FEEDBACK_TOOL, TOOL_METADATA, dev_secret, mint_token
from services.common.retry_policy import service_config
from services.common.settings import CommonSettings


def loopback(listen: str) -> str:
    """A target for a local listen address (`0.0.0.0:P` / `[::]:P` → `127.0.0.1:P`)."""
    host, _, port = listen.rpartition(":")
    return f"{'127.0.0.1' if host in ('0.0.0.0', '[::]', '') else host}:{port}"


def local_target(listen_variable: str, default: str):
    """Default target of a local service: where the local stack listens (its `*_LISTEN` variable)."""
    return lambda: loopback(os.environ.get(listen_variable, default))


class ClientSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_CLIENT_", extra="ignore", populate_by_name=True)

    # Where the services are; default: where the local stack listens (`AGENTFEEDBACK_*_LISTEN`, else 5005x).
    chat_target: str = Field(default_factory=local_target("AGENTFEEDBACK_CHAT_LISTEN", "127.0.0.1:50051"))
    feedback_target: str = Field(default_factory=local_target("AGENTFEEDBACK_FEEDBACK_LISTEN", "127.0.0.1:50052"))
    traces_target: str = Field(default_factory=local_target("AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN", "127.0.0.1:50053"))
    # Bearer token; empty → a dev token for `sub` minted from the embedded secret.
    token: str = ""
    # Subject (`sub`) of that dev token.
    sub: str = "owner"
    # The MCP server's own service credential (scope `feedback:tool`), sent as `x-agentfeedback-actor`
    # with its `resolve_feedback` calls so the audit trail records the tool; empty → minted from the
    # embedded secret (sub `svc:mcp`); with RS256/JWKS it must be configured.
    tool_token: str = ""
    # Deadline of each call, seconds.
    timeout_s: float = Field(default=30.0, gt=0)


@dataclass
class Clients:
    """Stubs over one channel per service, plus the metadata carrying the bearer token."""

    settings: ClientSettings
    token: str
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: ClientSettings | None = None) -> "Clients":
        s = settings or ClientSettings()
        token = s.token or mint_token(dev_secret(s), s.sub, DEV_SCOPES)
        return cls(settings=s, token=token)

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    def tool_md(self, tool: str) -> tuple[tuple[str, str], ...]:
        """`md` plus the MCP server's credential and the tool's name (the audit trail's RESOLVE)."""
        s = self.settings
        token = s.tool_token
        if not token and not (s.jwt_jwks_url or s.jwt_public_key_file):
            token = mint_token(dev_secret(s), "svc:mcp", (SCOPE_FEEDBACK_TOOL,))
        actor = ((ACTOR_METADATA, f"Bearer {token}"),) if token else ()
        return (*self.md, *actor, (TOOL_METADATA, tool))

    def _channel(self, target: str) -> grpc.aio.Channel:
        ch = grpc.aio.insecure_channel(target, options=[("grpc.service_config", service_config(round_robin=False))])
        self.channels.append(ch)
        return ch

    def chat(self) -> chat_pb2_grpc.ChatServiceStub:
        return chat_pb2_grpc.ChatServiceStub(self._channel(self.settings.chat_target))

    def feedback(self) -> feedback_pb2_grpc.FeedbackServiceStub:
        return feedback_pb2_grpc.FeedbackServiceStub(self._channel(self.settings.feedback_target))

    def traces(self) -> traces_pb2_grpc.TraceQueryServiceStub:
        return traces_pb2_grpc.TraceQueryServiceStub(self._channel(self.settings.traces_target))

    async def close(self) -> None:
        for ch in self.channels:
            await ch.close()
