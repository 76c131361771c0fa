"""The gateway's gRPC client of `agentfeedback.agent.v1.AgentService` (the `AgentPort` of
`services.chat.turn`). One channel, created at start-up. gRPC failures become `AgentCallError`:
DEADLINE_EXCEEDED → DEADLINE_EXCEEDED, UNAVAILABLE → UNAVAILABLE, CANCELLED → CANCELLED,
anything else → FAILED (with the agent's status code and message).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from agentfeedback.agent.v1 import agent_pb2, agent_pb2_grpc

from services.chat import workspace as ws
from services.chat.defects import ToolSignal, kinds_of
from services.chat.domain import AgentCallError, AgentReply, Role, ThinkInput
from services.common.upstream import upstream_detail

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
        workspace=workspace_view_pb(req.workspace),
    )


def workspace_view_pb(state: ws.State) -> agent_pb2.WorkspaceView:
    """The workspace the agent works on (ThinkRequest.workspace; artifact contents not repeated)."""
    return agent_pb2.WorkspaceView(
        objective=state.objective,
        plan=[agent_pb2.PlanStepView(text=s.text, state=int(s.state)) for s in state.plan],
        artifacts=[agent_pb2.ArtifactView(artifact_id=a.artifact_id, title=a.title, media_type=a.media_type,
                                          version=a.version) for a in state.artifacts],
        preferences=[agent_pb2.PreferenceView(text=p.text, source=int(p.source)) for p in state.preferences],
    )


def workspace_op(op: agent_pb2.WorkspaceOperation) -> ws.Op:
    """One proposed operation as the gateway's domain sees it (unknown enum values kept: `apply` drops
    what is invalid)."""
    kind = op.WhichOneof("operation")
    if kind == "set_objective":
        return ws.SetObjective(op.set_objective.text)
    if kind == "set_plan":
        return ws.SetPlan(tuple(ws.PlanStep(s.text, s.state) for s in op.set_plan.steps))
    if kind == "set_plan_step_state":
        return ws.SetPlanStepState(op.set_plan_step_state.step_index, op.set_plan_step_state.state)
    if kind == "put_artifact":
        a = op.put_artifact
        return ws.PutArtifact(a.artifact_id, a.title, a.media_type, a.content)
    if kind == "add_preference":
        return ws.AddPreference(op.add_preference.text, op.add_preference.source)
    if kind == "remove_preference":
        return ws.RemovePreference(op.remove_preference.text)
    return ws.EmptyOp()


def _reply(resp: agent_pb2.ThinkResponse) -> AgentReply:
    """The reply, with the suspected-defect signals the agent reported (events, tool statuses)."""
    kinds, tools = kinds_of(resp.events, (ToolSignal(t.name, t.status, t.truncated) for t in resp.tool_calls))
    return AgentReply(
        content=resp.content, model=resp.model, defects=kinds,
        defect_tools=tools, workspace_ops=tuple(workspace_op(o) for o in resp.workspace_operations),
    )


def _error(e: grpc.aio.AioRpcError) -> AgentCallError:
    kind = _KINDS.get(e.code(), "FAILED")
    return AgentCallError(kind, upstream_detail(e, 480))


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
