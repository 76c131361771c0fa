"""A report on a workspace component (issue 23): the component's state at the end of the report's turn,
frozen into the report's snapshot (feedback.proto `FrozenComponent`) so the evidence outlives Clear chat,
DeleteTurn and later turns, like the frozen messages and spans. Pure: the workspace comes from
ChatService.GetWorkspace (read with the caller's token by `services.feedback.reports`).
"""
from __future__ import annotations

from agentfeedback.chat.v1 import chat_pb2

from services.common.errors import InvalidArgument
from services.common.ids import decimal_id
from services.feedback.model.enums import RatingScope
from services.feedback.model.report import Component, FrozenComponent

# The report's frozen text: an artifact's whole content fits (chat.proto Artifact: ≤ 32768 bytes).
MAX_TEXT_BYTES = 32768
COMPONENT_SCOPES = (RatingScope.OBJECTIVE, RatingScope.PLAN, RatingScope.ARTIFACT, RatingScope.PREFERENCES)
_STATES = {1: "pending", 2: "doing", 3: "done", 4: "dropped"}
_SOURCES = {1: "owner", 2: "agent"}


def check_component(scope: int, artifact_id: str, field_path: str = "feedback.component") -> Component:
    """INVALID_ARGUMENT naming `<field_path>.scope` (not a component scope) or `.artifact_id` (ARTIFACT:
    not a decimal id ≥ 1; other scopes: not empty)."""
    if scope not in {int(s) for s in COMPONENT_SCOPES}:
        raise InvalidArgument(f"{field_path}.scope", "must be OBJECTIVE, PLAN, ARTIFACT or PREFERENCES")
    s = RatingScope(scope)
    if s == RatingScope.ARTIFACT:
        if decimal_id(artifact_id) is None:
            raise InvalidArgument(f"{field_path}.artifact_id", "must be the id (≥ 1) of an artifact of the turn")
    elif artifact_id:
        raise InvalidArgument(f"{field_path}.artifact_id", "is only allowed for ARTIFACT scope")
    return Component(s, artifact_id)


def _clip_bytes(text: str) -> tuple[str, bool]:
    raw = text.encode()
    if len(raw) <= MAX_TEXT_BYTES:
        return text, False
    return raw[:MAX_TEXT_BYTES].decode(errors="ignore"), True


def freeze(ws: chat_pb2.Workspace, c: Component, field_path: str = "feedback.component") -> FrozenComponent:
    """`c` as workspace `ws` (the report's turn) shows it. INVALID_ARGUMENT naming
    `<field_path>.artifact_id` when the turn's workspace shows no such artifact."""
    base = {"scope": c.scope, "artifact_id": c.artifact_id, "turn_index": ws.snapshot_turn_index, "frozen": True}
    if c.scope == RatingScope.OBJECTIVE:
        text, changed = ws.objective.text, ws.objective.changed
    elif c.scope == RatingScope.PLAN:
        text = "\n".join(f"[{_STATES.get(s.state, 'unknown')}] {s.text}" for s in ws.plan.steps)
        changed = ws.plan.changed
    elif c.scope == RatingScope.PREFERENCES:
        text = "\n".join(f"{p.text} ({_SOURCES.get(p.source, 'unknown')})" for p in ws.preferences.items)
        changed = ws.preferences.changed
    else:
        a = next((a for a in ws.artifacts if str(a.artifact_id) == c.artifact_id), None)
        if a is None:
            raise InvalidArgument(f"{field_path}.artifact_id", "is not an artifact of the turn's workspace",
                                  reason="UNKNOWN_ARTIFACT")
        text, clipped = _clip_bytes(a.content)
        return FrozenComponent(**base, text=text, text_clipped=clipped, title=a.title,
                               media_type=a.media_type, version=a.version, changed=a.changed)
    text, clipped = _clip_bytes(text)
    return FrozenComponent(**base, text=text, text_clipped=clipped, changed=changed)


def unfrozen(c: Component) -> FrozenComponent:
    """A component named by a report whose workspace could not be read (the chat service was unreachable)."""
    return FrozenComponent(c.scope, c.artifact_id)
