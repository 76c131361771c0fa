"""The gateway's gRPC client of `agentfeedback.agent.v1.AgentService` (the `AgentPort` of
`services.chat.turn`). One channel, created at start-up. gRPC failures become `AgentCallError`:
DEADLINE_EXCEEDED → DEADLINE_EXCEEDED, UNAVAILABLE → UNAVAILABLE, CANCELLED → CANCELLED,
anything else → FAILED (with the agent's status code and message).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from agentfeedback.agent.v1 import agent_pb2, agent_pb2_grpc

from services.chat.defects import ToolSignal, kinds_of
from services.chat.domain import AgentCallError, AgentReply, Role, ThinkInput

_KINDS = {
    grpc.StatusCode.DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
    grpc.StatusCode.UNAVAILABLE: "UNAVAILABLE",
    grpc.StatusCode.CANCELLED: "CANCELLED",
}
_ROLES = {Role.USER: agent_pb2.ROLE_USER, Role.ASSISTANT: agent_pb2.ROLE_ASSISTANT}


def _request(req: ThinkInput) -> agent_pb2.ThinkRequest:
    return agent_pb2.ThinkRequest(
        instance=req.instance,
        agent=req.agent,
        content=req.content,
        turn_index=req.turn_index,
        user_message=req.user_message,
        history=[
            agent_pb2.ConversationMessage(
                role=_ROLES.get(h.role, agent_pb2.ROLE_UNSPECIFIED), content=h.content, name=h.name,
                turn_index=h.turn_index,
            )
            for h in req.history
        ],
    )


def _reply(resp: agent_pb2.ThinkResponse) -> AgentReply:
    """The reply, with the suspected-defect signals the agent reported (events, tool statuses)."""
    kinds, tools = kinds_of(resp.events, (ToolSignal(t.name, t.status, t.truncated) for t in resp.tool_calls))
    return AgentReply(
        content=resp.content, model=resp.model, defects=kinds,
        defect_tools=tools,
    )


def _error(e: grpc.aio.AioRpcError) -> AgentCallError:
    kind = _KINDS.get(e.code(), "FAILED")
    return AgentCallError(kind, f"{e.code().name}: {e.details() or ''}"[:500])


class AgentClient:
    """Calls the agent with the turn's metadata (traceparent + the owner's token) and deadline."""

    def __init__(self, channel: grpc.aio.Channel):
        self._stub = agent_pb2_grpc.AgentServiceStub(channel)

    async def think(
        self, req: ThinkInput, *, timeout_s: float, metadata: tuple[tuple[str, str], ...]
    ) -> AgentReply:
        """The complete reply. Raises AgentCallError (see module doc)."""
        try:
            return _reply(await self._stub.Think(_request(req), timeout=timeout_s, metadata=metadata))
        except grpc.aio.AioRpcError as e:
            raise _error(e) from None

    async def stream(
        self, req: ThinkInput, *, timeout_s: float, metadata: tuple[tuple[str, str], ...]
    ) -> AsyncIterator[str | AgentReply]:
        """Reply chunks (str) as the agent produces them, then the complete AgentReply."""
        call = self._stub.StreamThink(_request(req), timeout=timeout_s, metadata=metadata)
        try:
            async for item in call:
                if item.HasField("done"):
                    yield _reply(item.done)
                else:
                    yield item.content_delta
        except grpc.aio.AioRpcError as e:
            raise _error(e) from None
        finally:
            call.cancel()
