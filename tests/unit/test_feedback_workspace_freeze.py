"""A report's frozen workspace component (services.feedback.workspace_freeze, issue 23): what is checked
in the request, and what a component looks like once frozen."""
from __future__ import annotations

import pytest
from agentfeedback.chat.v1 import chat_pb2

from services.common.errors import InvalidArgument
from services.feedback.model.enums import RatingScope
from services.feedback.model.report import Component
from services.feedback.repository.rows import component_from_json, component_json
from services.feedback.workspace_freeze import MAX_TEXT_BYTES, check_component, freeze, unfrozen

WS = chat_pb2.Workspace(
    turn_index=3, snapshot_turn_index=2,
    objective=chat_pb2.Objective(text="Ship the parser", changed=False),
    plan=chat_pb2.Plan(steps=[chat_pb2.PlanStep(text="a", state=chat_pb2.PLAN_STEP_STATE_DONE),
                              chat_pb2.PlanStep(text="b", state=chat_pb2.PLAN_STEP_STATE_DOING)], changed=True),
    preferences=chat_pb2.Preferences(items=[chat_pb2.Preference(text="no jargon", source=chat_pb2.PREFERENCE_SOURCE_OWNER)]),
    artifacts=[chat_pb2.Artifact(artifact_id=1, title="README", media_type="text/markdown", version=2,
                                 content="é" * 20000, changed=True)],
)


@pytest.mark.parametrize(("scope", "artifact_id", "field"), [
    (int(RatingScope.MESSAGE), "", "feedback.component.scope"), (0, "", "feedback.component.scope"),
    (int(RatingScope.ARTIFACT), "", "feedback.component.artifact_id"),
    (int(RatingScope.ARTIFACT), "0", "feedback.component.artifact_id"),
    (int(RatingScope.ARTIFACT), "1x", "feedback.component.artifact_id"),
    (int(RatingScope.PLAN), "1", "feedback.component.artifact_id"),
])
def test_a_component_that_is_none_of_the_workspace_is_refused_naming_the_field(scope, artifact_id, field):
    with pytest.raises(InvalidArgument) as e:
        check_component(scope, artifact_id)
    assert e.value.field_path == field


def test_each_component_freezes_as_the_turn_left_it_and_round_trips_as_stored():
    plan = freeze(WS, check_component(int(RatingScope.PLAN), ""))
    assert (plan.text, plan.changed, plan.turn_index, plan.frozen) == ("[done] a\n[doing] b", True, 2, True)
    assert freeze(WS, Component(RatingScope.PREFERENCES)).text == "no jargon (owner)"
    art = freeze(WS, check_component(int(RatingScope.ARTIFACT), "1"))
    assert (art.title, art.version, art.changed, art.text_clipped) == ("README", 2, True, True)
    assert len(art.text.encode()) <= MAX_TEXT_BYTES and art.text == "é" * (MAX_TEXT_BYTES // 2)
    with pytest.raises(InvalidArgument) as e:
        freeze(WS, Component(RatingScope.ARTIFACT, "2"))
    assert e.value.field_path == "feedback.component.artifact_id"
    for f in (plan, art, unfrozen(Component(RatingScope.OBJECTIVE))):
        assert component_from_json(component_json(f)) == f
    assert not unfrozen(Component(RatingScope.OBJECTIVE)).frozen
