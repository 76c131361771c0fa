"""The workspace's pure rules (services.chat.workspace.apply) and the reference agent's proposals
(services.chat.agent.workspace_rules, workspace_tools): what a turn's operations do, what is dropped and
why, what counts as changed."""
from __future__ import annotations

from agentfeedback.agent.v1 import agent_pb2

from services.chat import workspace as ws
from services.chat.agent.workspace_rules import propose
from services.chat.agent.workspace_tools import to_operation
from services.chat.agent_client import workspace_op


def test_valid_operations_apply_in_order_and_the_diff_names_what_changed():
    ops = [ws.SetObjective("Ship it"), ws.PutArtifact(0, "A", "", "a"), ws.PutArtifact(0, "B", "text/csv", "b"),
           ws.PutArtifact(1, "", "", "a2"), ws.AddPreference("no jargon", ws.PreferenceSource.OWNER)]
    out = ws.apply(ws.State(), ops, 0, 1, {})
    assert out.dropped == []
    # One artifact written twice in a turn keeps one version: the last write.
    assert [(w.artifact_id, w.version, w.title, w.media_type, w.content) for w in out.writes] == [
        (1, 1, "A", "text/markdown", "a2"), (2, 1, "B", "text/csv", "b")]
    assert out.next_artifact_id == 3 and out.changed == ("objective", "artifact", "preferences")
    assert out.changed_artifacts == (1, 2) and out.state.objective_turn == 0
    again = ws.apply(out.state, [ws.PutArtifact(2, "", "", "b2")], 1, 3, {1: 1, 2: 1})
    assert [(w.artifact_id, w.version, w.title) for w in again.writes] == [(2, 2, "B")]
    assert again.changed == ("artifact",) and again.changed_artifacts == (2,)
    assert ws.apply(again.state, [], 2, 3, {}).changed == ()  # nothing done, nothing changed


def test_each_invalid_operation_is_dropped_whole_with_a_reason_and_the_rest_apply():
    base = ws.apply(ws.State(), [ws.SetPlan((ws.PlanStep("a"), ws.PlanStep("b")))], 0, 1, {}).state
    ops = [
        ws.SetObjective(""), ws.SetObjective("x" * 1001), ws.SetObjective("a\x00b"),
        ws.SetPlan(tuple(ws.PlanStep("s") for _ in range(21))), ws.SetPlan((ws.PlanStep("ok"), ws.PlanStep("y" * 501))),
        ws.SetPlanStepState(2, ws.StepState.DONE), ws.SetPlanStepState(0, 0), ws.SetPlanStepState(0, 9),
        ws.PutArtifact(0, "", "", "no title"), ws.PutArtifact(5, "", "", "unknown id"),
        ws.PutArtifact(0, "T", "not a type", "c"), ws.PutArtifact(0, "T", "", "z" * 32769),
        ws.AddPreference("p" * 301, 1), ws.RemovePreference("absent"), ws.EmptyOp(),
        ws.SetPlanStepState(1, ws.StepState.DONE),
    ]
    out = ws.apply(base, ops, 1, 1, {})
    assert [d.index for d in out.dropped] == list(range(15))
    assert all(len(d.reason) < 80 and "zzz" not in d.reason for d in out.dropped)
    assert out.writes == [] and out.state.objective == "" and out.changed == ("plan",)
    assert [(s.text, s.state) for s in out.state.plan] == [("a", ws.StepState.PENDING), ("b", ws.StepState.DONE)]


def test_limits_per_conversation_and_per_turn():
    full = ws.State(artifacts=tuple(ws.ArtifactRef(i, 1, f"a{i}", "text/plain") for i in range(1, 21)))
    out = ws.apply(full, [ws.PutArtifact(0, "one more", "", "c"), ws.PutArtifact(20, "", "", "v2")], 3, 21, {20: 1})
    assert [d.index for d in out.dropped] == [0] and [(w.artifact_id, w.version) for w in out.writes] == [(20, 2)]
    many = [ws.AddPreference(f"p{i}", 1) for i in range(40)]
    out = ws.apply(ws.State(), many, 0, 1, {})
    assert len(out.state.preferences) == 20 and [d.index for d in out.dropped] == list(range(20, 40))


def test_the_reference_agent_proposes_from_plain_words():
    empty = agent_pb2.WorkspaceView()
    names = [n for n, _ in propose("Write a README and a changelog. Never use jargon. Keep it short.", 0, empty, "r")]
    assert names == ["set_objective", "write_artifact", "write_artifact", "add_preference", "add_preference"]
    steps = dict(propose("First outline it, then draft it, and finally proofread it.", 1, empty, "r"))["set_plan"]
    assert [s["text"] for s in steps["steps"]] == ["outline it", "draft it", "proofread it"]
    known = agent_pb2.WorkspaceView(objective="x", preferences=[agent_pb2.PreferenceView(text="Never use jargon.")])
    assert propose("Never use jargon.", 2, known, "r") == []  # no redirect, nothing new
    assert propose("That's wrong, write that down.", 2, empty, "r") == []  # a complaint changes nothing
    assert [n for n, _ in propose("Actually, do the slides instead.", 3, known, "r")] == ["set_objective"]


def test_a_tool_call_becomes_the_operation_the_gateway_validates():
    op = workspace_op(to_operation("write_artifact", {"title": "T", "content": "c", "artifact_id": "9" * 30}))
    assert op == ws.PutArtifact(-1, "T", "", "c")  # an out-of-range id stays invalid, never an overflow
    assert workspace_op(to_operation("set_plan_step_state", {"step_index": 1, "state": "done"})) == \
        ws.SetPlanStepState(1, 3)
    assert to_operation("list_subordinates", {}) is None
    assert isinstance(workspace_op(agent_pb2.WorkspaceOperation()), ws.EmptyOp)
