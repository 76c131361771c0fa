"""The instrument's workspace questions in the shared vocabulary (console/src/taxonomy.json, issue 23):
every aspect the issue names exists on its component scope, and says when it is asked."""
from __future__ import annotations

import json
from pathlib import Path

TAXONOMY = Path(__file__).resolve().parents[2] / "console" / "src" / "taxonomy.json"
WHEN = {"exists", "changed", "revised", "paths", "forked"}  # the conditions console/src/taxonomy.ts knows


def test_every_aspect_of_the_instrument_is_there_with_when_it_applies():
    qs = {q["aspect"]: q for q in json.loads(TAXONOMY.read_text())["questions"]}
    expected = {
        "target_endorsement": ("OBJECTIVE", "exists"), "target_change": ("OBJECTIVE", "changed"),
        "plan_endorsement": ("PLAN", "exists"), "plan_delta": ("PLAN", "changed"),
        "artifact_satisfaction": ("ARTIFACT", "exists"), "artifact_fit": ("ARTIFACT", "exists"),
        "artifact_delta": ("ARTIFACT", "revised"), "preferences_extracted": ("PREFERENCES", "exists"),
        "preferences_followed": ("PREFERENCES", "exists"), "preferences_delta": ("PREFERENCES", "changed"),
        "branch_value": ("CONVERSATION", "paths"), "trajectory_assessment": ("CONVERSATION", None),
        "task_completion": ("CONVERSATION", None), "objective_endorsement_history": ("OBJECTIVE", None),
        "goal_evolution": ("OBJECTIVE", None), "goal_ownership": ("OBJECTIVE", None),
    }
    assert {a: (qs[a]["scope"], qs[a].get("when")) for a in expected if a in qs} == expected
    assert all(q.get("when", "exists") in WHEN for q in qs.values())
    for a in ("goal_evolution", "goal_ownership", "objective_endorsement_history"):
        assert qs[a]["min_turns"] >= 2  # a trajectory needs turns
    # Rejecting the objective asks for the emerging goal in the owner's words (stored as the note).
    (reject,) = [c for c in qs["target_endorsement"]["choices"] if c["sentiment"] == "NEGATIVE"]
    assert reject.get("note_prompt")
    # The component questions live in the modal's workspace section, never in the trajectory's.
    assert {a for a, q in qs.items() if q.get("section") == "workspace"} == {
        "target_endorsement", "target_change", "plan_endorsement", "plan_delta", "preferences_extracted",
        "preferences_followed", "preferences_delta"}
