"""`agentfeedback.agent.v1.AgentService`: thin translation between protos and `ReferenceAgent`.

Both methods need scope `chat` on the owner's forwarded token (the gateway calls on the owner's
behalf). They are untraced by the interceptor: `agent.think` is opened by the agent itself with
the gateway's context (from `traceparent`) as its parent.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentfeedback.agent.v1 import agent_pb2, agent_pb2_grpc

from services.chat.agent.openai_backend import BackendError
from services.chat.agent.reference import AgentTurn, ReferenceAgent
from services.chat.agent.result import AgentResult
from services.chat.agent.workspace_tools import to_operation
from services.chat.domain import SLUG, parse_instance_name, parse_message_name
from services.common.auth import SCOPE_CHAT, current_principal
from services.common.errors import InvalidArgument, Unavailable
from services.common.ids import check_text, is_name_under
from services.common.server import extract_context

SERVICE = "agentfeedback.agent.v1.AgentService"
METHOD_SCOPES: dict[str, str | None] = {
    f"/{SERVICE}/Think": SCOPE_CHAT,
    f"/{SERVICE}/StreamThink": SCOPE_CHAT,
}
UNTRACED_METHODS = tuple(METHOD_SCOPES)
# Reply chunk size of StreamThink, in characters. The reference agent has its whole reply before the
# first chunk (they leave back to back), so the size decides only how many gRPC messages carry it, on
# each hop (agent → gateway → caller). Each message costs ~40-60 µs of CPU a process a hop: at 64 a
# median reply (~1,250 characters) was 20 chunks, 2.6 ms of the gateway's and 1.2 ms of the agent's CPU
# a streamed turn (issue 29). At 512 a reply over 512 characters still streams as several chunks.
CHUNK_CHARS = 512
_ROLES = {agent_pb2.ROLE_USER: "user", agent_pb2.ROLE_ASSISTANT: "assistant"}
# ROLE_UNSPECIFIED too: the gateway sends it for a stored message of another role (read as the user's).
_HISTORY_ROLES = frozenset((agent_pb2.ROLE_UNSPECIFIED, *_ROLES))
_NO_DEADLINE_S = 10**7


def _turn(request: agent_pb2.ThinkRequest, limits: TurnLimits) -> AgentTurn:
    """ThinkRequest → AgentTurn; INVALID_ARGUMENT naming the first bad field (what chat itself would
    refuse, bounded like every service's input): `instance` (not `instances/{id}`), `agent` (not a
    slug), `content` (empty, NUL, over `max_content_chars`), `turn_index` (negative), `user_message`
    (not a message of `instance`), `history` (over `max_history_messages`), `history[i].role`
    (unknown), `history[i].content` (NUL), `history[i].name` (not a message of `instance`),
    `history[i].turn_index` (negative)."""
    instance_id = parse_instance_name(request.instance, "instance")
    if request.agent and not SLUG.match(request.agent):
        raise InvalidArgument("agent", "must match [a-z][a-z0-9-]{0,62} (e.g. 'reference')")
    check_text(request.content, "content", limits.max_content_chars, required=True)
    if request.turn_index < 0:
        raise InvalidArgument("turn_index", "must not be negative")
    _check_message_of(request.user_message, instance_id, "user_message")
    if len(request.history) > limits.max_history_messages:
        raise InvalidArgument("history", f"has {len(request.history)} messages; the limit is {limits.max_history_messages}",
                              reason="TOO_LONG", limit=str(limits.max_history_messages))
    history: list[tuple[str, str]] = []
    replies: list[tuple[str, int]] = []
    messages = f"instances/{instance_id}/messages/"  # a history name is this and a message id
    # Each field read once: a protobuf string field read builds a new Python string (a reply is ~1 KB).
    for i, m in enumerate(request.history):
        role, content, name, turn_index = m.role, m.content, m.name, m.turn_index
        if role not in _HISTORY_ROLES:
            raise InvalidArgument(f"history[{i}].role", f"unknown role {role}")
        # No length bound of its own: replies are as long as the agent made them; the request's size is
        # bounded by gRPC's receive limit (4 MiB).
        if "\x00" in content:  # check_text's refusal (the field path is built only for an error)
            check_text(content, f"history[{i}].content")
        if name and not is_name_under(name, messages):
            _check_message_of(name, instance_id, f"history[{i}].name")
        if turn_index < 0:
            raise InvalidArgument(f"history[{i}].turn_index", "must not be negative")
        history.append((_ROLES.get(role, "user"), content))
        if role == agent_pb2.ROLE_ASSISTANT and name:
            replies.append((name, turn_index))
    return AgentTurn(
        instance=request.instance,
        agent=request.agent,
        content=request.content,
        turn_index=request.turn_index,
        user_message=request.user_message,
        history=history,
        replies=tuple(replies),
        workspace=request.workspace,
    )


def _check_message_of(name: str, instance_id: str, field_path: str) -> None:
    """Empty, or `instances/{instance_id}/messages/{id}`; INVALID_ARGUMENT naming `field_path` otherwise."""
    if name and parse_message_name(name, field_path)[0] != instance_id:
        raise InvalidArgument(field_path, "must be a message of `instance`")


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
        workspace_operations=[op for name, args in r.workspace_ops if (op := to_operation(name, args)) is not None],
    )


@dataclass(frozen=True)
class TurnLimits:
    """Bounds of a ThinkRequest (AgentSettings)."""

    max_content_chars: int = 32000
    max_history_messages: int = 200


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, agent: ReferenceAgent, limits: TurnLimits = TurnLimits()):
        self._agent = agent
        self._limits = limits

    async def _run(self, request, context) -> AgentResult:
        try:
            turn = _turn(request, self._limits)
        except InvalidArgument as e:
            self._agent.refused(extract_context(context), request.agent, request.instance, request.turn_index,
                                request.user_message, e)
            raise
        p = current_principal()
        remaining = context.time_remaining()
        deadline = None if remaining is None or remaining > _NO_DEADLINE_S else remaining
        try:
            return await self._agent.think(turn, p.sub, p.token, extract_context(context), deadline)
        except BackendError as e:
            raise Unavailable(f"model backend: {e}", reason="MODEL_BACKEND_FAILED") from e

    async def Think(self, request, context):  # noqa: N802
        """The complete reply. INVALID_ARGUMENT naming the bad field (see `_turn`); UNAVAILABLE when
        the model backend fails."""
        return _response(await self._run(request, context))

    async def StreamThink(self, request, context):  # noqa: N802
        """Reply chunks of CHUNK_CHARS characters, then `done` with the complete reply."""
        result = await self._run(request, context)
        for i in range(0, len(result.content), CHUNK_CHARS):
            yield agent_pb2.StreamThinkResponse(content_delta=result.content[i : i + CHUNK_CHARS])
        yield agent_pb2.StreamThinkResponse(done=_response(result))
