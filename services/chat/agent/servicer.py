"""`agentfeedback.agent.v1.AgentService`: thin translation between protos and `ReferenceAgent`.

Both methods need scope `chat` on the owner's forwarded token (the gateway calls on the owner's
behalf). They are untraced by the interceptor: `agent.think` is opened by the agent itself with
the gateway's context (from `traceparent`) as its parent.
"""

from __future__ import annotations

from agentfeedback.agent.v1 import agent_pb2, agent_pb2_grpc

from services.chat.agent.openai_backend import BackendError
from services.chat.agent.reference import AgentTurn, ReferenceAgent
from services.chat.agent.result import AgentResult
from services.common.auth import SCOPE_CHAT, current_principal
from services.common.errors import InvalidArgument, Unavailable
from services.common.server import extract_context

SERVICE = "agentfeedback.agent.v1.AgentService"
METHOD_SCOPES: dict[str, str | None] = {
    f"/{SERVICE}/Think": SCOPE_CHAT,
    f"/{SERVICE}/StreamThink": SCOPE_CHAT,
}
UNTRACED_METHODS = tuple(METHOD_SCOPES)
# Reply chunk size of StreamThink, in characters.
CHUNK_CHARS = 64
_ROLES = {agent_pb2.ROLE_USER: "user", agent_pb2.ROLE_ASSISTANT: "assistant"}
_NO_DEADLINE_S = 10**7


def _turn(request: agent_pb2.ThinkRequest) -> AgentTurn:
    if not request.content.strip():
        raise InvalidArgument("content", "must not be empty")
    return AgentTurn(
        instance=request.instance,
        agent=request.agent,
        content=request.content,
        turn_index=request.turn_index,
        user_message=request.user_message,
        history=[(_ROLES.get(m.role, "user"), m.content) for m in request.history],
        replies=tuple(
            (m.name, m.turn_index) for m in request.history if m.role == agent_pb2.ROLE_ASSISTANT and m.name
        ),
    )


def _response(r: AgentResult) -> agent_pb2.ThinkResponse:
    return agent_pb2.ThinkResponse(
        content=r.content,
        model=r.model,
        tool_calls=[
            agent_pb2.ToolCall(
                id=t.call_id,
                name=t.name,
                status=t.status,
                result_size_bytes=t.result_size_bytes,
                truncated=t.truncated,
            )
            for t in r.tool_calls
        ],
        events=[*r.events, *(["chat.truncated"] if any(t.truncated for t in r.tool_calls) else [])],
    )


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, agent: ReferenceAgent):
        self._agent = agent

    async def _run(self, request, context) -> AgentResult:
        turn = _turn(request)
        p = current_principal()
        remaining = context.time_remaining()
        deadline = None if remaining is None or remaining > _NO_DEADLINE_S else remaining
        try:
            return await self._agent.think(turn, p.sub, p.token, extract_context(context), deadline)
        except BackendError as e:
            raise Unavailable(f"model backend: {e}", reason="MODEL_BACKEND_FAILED") from e

    async def Think(self, request, context):  # noqa: N802
        """The complete reply. INVALID_ARGUMENT (`content` empty); UNAVAILABLE when the model backend
        fails."""
        return _response(await self._run(request, context))

    async def StreamThink(self, request, context):  # noqa: N802
        """Reply chunks of CHUNK_CHARS characters, then `done` with the complete reply."""
        result = await self._run(request, context)
        for i in range(0, len(result.content), CHUNK_CHARS):
            yield agent_pb2.StreamThinkResponse(content_delta=result.content[i : i + CHUNK_CHARS])
        yield agent_pb2.StreamThinkResponse(done=_response(result))
