"""Feedback on the co-construction workspace over real gRPC, the real chat gateway and PostgreSQL
(issue 23): ratings of each component scope anchored to the turn's snapshot, an artifact id that must
name a real artifact of the conversation, and statistics (per-dimension series, the negative-signal
feed) that cover every component scope."""
from __future__ import annotations

import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf import field_mask_pb2

from tests.stack import Stack

OBJ, PLAN, ART, PREF = pb.RATING_SCOPE_OBJECTIVE, pb.RATING_SCOPE_PLAN, pb.RATING_SCOPE_ARTIFACT, pb.RATING_SCOPE_PREFERENCES
POS, NEG = pb.RATING_SENTIMENT_POSITIVE, pb.RATING_SENTIMENT_NEGATIVE
WRITE_TWO = "Write a README and a changelog. Always cite sources."
PLAN_TEXT = "First outline it, then draft it, and finally proofread it."


def rid() -> str:
    return str(uuid.uuid4())


async def conversation(stack: Stack, *contents: str, sub: str = "alice") -> str:
    inst = await stack.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Docs", agent="reference")), metadata=stack.md(sub))
    for c in contents:
        await stack.chat().SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content=c, request_id=rid()),
                                       metadata=stack.md(sub))
    return inst.name


async def put(stack: Stack, inst: str, turn: int, scope: int, aspect: str, sentiment: int, artifact: str = "",
              sub: str = "alice", note: str = "") -> pb.Rating:
    return await stack.feedback().PutRating(pb.PutRatingRequest(
        rating=pb.Rating(conversation=inst, turn_index=turn, scope=scope, aspect=aspect, sentiment=sentiment,
                         artifact_id=artifact, note=note),
        update_mask=field_mask_pb2.FieldMask(paths=["sentiment", "note"]), request_id=rid()), metadata=stack.md(sub))


async def test_each_component_is_rated_at_its_turn_and_an_artifact_id_must_be_real(stack: Stack):
    inst = await conversation(stack, WRITE_TWO, PLAN_TEXT)
    got = [await put(stack, inst, 0, OBJ, "target_endorsement", NEG, note="A benchmark report instead"),
           await put(stack, inst, 1, PLAN, "plan_delta", POS),
           await put(stack, inst, 0, PREF, "preferences_extracted", POS),
           await put(stack, inst, 0, ART, "artifact_fit", NEG, artifact="2"),
           await put(stack, inst, 0, ART, "artifact_quality", POS, artifact="0")]  # the live document
    assert [(r.scope, r.turn_index, r.artifact_id) for r in got] == [(OBJ, 0, ""), (PLAN, 1, ""), (PREF, 0, ""),
                                                                     (ART, 0, "2"), (ART, 0, "0")]
    assert got[0].note == "A benchmark report instead"  # the emerging goal in the owner's words
    # What each rating is about is the snapshot of its turn (same key).
    ws = await stack.chat().GetWorkspace(chat_pb2.GetWorkspaceRequest(name=f"{inst}/workspace", turn_index=0),
                                         metadata=stack.md())
    assert [a.artifact_id for a in ws.artifacts] == [1, 2] and ws.objective.text
    for bad in ("3", "abc", "01", "-1", "9" * 40):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await put(stack, inst, 0, ART, "artifact_fit", NEG, artifact=bad)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "rating.artifact_id" in e.value.details()
        assert "9" * 40 not in e.value.details()  # never echoes the client's value
    # Another owner's conversation is NOT_FOUND, not "unknown artifact" (its artifacts are not revealed).
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await put(stack, inst, 0, ART, "artifact_fit", NEG, artifact="1", sub="mallory")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # A fork keeps the ids: the copies and new ratings of the fork name the same artifacts.
    fork = (await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=inst, turn_index=0, request_id=rid()), metadata=stack.md())).instance
    copied = (await stack.feedback().ListRatings(pb.ListRatingsRequest(conversation=fork.name), metadata=stack.md())).ratings
    assert {(r.scope, r.artifact_id) for r in copied} == {(OBJ, ""), (PREF, ""), (ART, "2"), (ART, "0")}
    assert (await put(stack, fork.name, 0, ART, "artifact_fit", POS, artifact="1")).artifact_id == "1"


async def test_statistics_cover_every_component_scope(stack: Stack):
    inst = await conversation(stack, WRITE_TWO, PLAN_TEXT)
    said = [(0, OBJ, "target_endorsement", NEG, ""), (1, PLAN, "plan_endorsement", NEG, ""),
            (0, ART, "artifact_satisfaction", NEG, "1"), (0, PREF, "preferences_followed", NEG, ""),
            (1, OBJ, "target_endorsement", POS, "")]
    for turn, scope, aspect, sentiment, artifact in said:
        await put(stack, inst, turn, scope, aspect, sentiment, artifact=artifact)
    s = await stack.feedback().GetFeedbackStats(pb.GetFeedbackStatsRequest(window_days=7), metadata=stack.md("ops"))
    dims = {(d.scope, d.aspect): d for d in s.dimensions}
    assert set(dims) == {(OBJ, "target_endorsement"), (PLAN, "plan_endorsement"), (ART, "artifact_satisfaction"),
                         (PREF, "preferences_followed")}
    obj = dims[(OBJ, "target_endorsement")]
    assert (obj.positive, obj.negative) == (1, 1) and len(obj.daily) == 7
    assert sum(d.negative for d in obj.daily) == 1 and sum(d.positive for d in obj.daily) == 1
    for scope, aspect in ((PLAN, "plan_endorsement"), (ART, "artifact_satisfaction"), (PREF, "preferences_followed")):
        assert sum(d.negative for d in dims[(scope, aspect)].daily) == 1
    # The negative-signal feed: every component scope's negative ratings, and each scope as a filter.
    feed = (await stack.feedback().ListRecentFeedback(pb.ListRecentFeedbackRequest(negative_only=True),
                                                      metadata=stack.md("ops"))).items
    assert sorted(i.rating.scope for i in feed) == sorted([OBJ, PLAN, ART, PREF])
    for scope in (OBJ, PLAN, ART, PREF):
        only = (await stack.feedback().ListRecentFeedback(pb.ListRecentFeedbackRequest(
            negative_only=True, scope=scope), metadata=stack.md("ops"))).items
        assert [i.rating.scope for i in only] == [scope]
    (art,) = [i.rating for i in feed if i.rating.scope == ART]
    assert art.artifact_id == "1" and art.turn_index == 0


async def reply_of(stack: Stack, inst: str, turn: int) -> chat_pb2.Message:
    msgs = (await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst, turn_index=turn),
                                            metadata=stack.md())).messages
    return next(m for m in msgs if m.role == chat_pb2.ROLE_ASSISTANT)


async def report_on(stack: Stack, message: str, scope: int, artifact: str = "", body: str = "wrong") -> pb.Feedback:
    return await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(feedback=pb.Feedback(
        message=message, body=body, sentiment=pb.SENTIMENT_BAD,
        component=pb.WorkspaceComponent(scope=scope, artifact_id=artifact)), request_id=rid()), metadata=stack.md())


async def test_a_report_on_an_artifact_keeps_its_frozen_content_after_the_conversation_is_cleared(stack: Stack):
    inst = await conversation(stack, WRITE_TWO, PLAN_TEXT)
    ws0 = await stack.chat().GetWorkspace(chat_pb2.GetWorkspaceRequest(name=f"{inst}/workspace", turn_index=0),
                                          metadata=stack.md())
    changelog = ws0.artifacts[1]
    on_artifact = await report_on(stack, (await reply_of(stack, inst, 0)).name, ART, "2", "the changelog is wrong")
    f = on_artifact.snapshot.component
    assert (on_artifact.component.scope, on_artifact.component.artifact_id) == (ART, "2")
    assert (f.frozen, f.scope, f.artifact_id, f.turn_index, f.title, f.version, f.changed) == (
        True, ART, "2", 0, changelog.title, 1, True)
    assert f.text == changelog.content and not f.text_clipped
    on_plan = await report_on(stack, (await reply_of(stack, inst, 1)).name, PLAN)
    assert on_plan.snapshot.component.text == "[doing] outline it\n[pending] draft it\n[pending] proofread it"
    assert on_plan.snapshot.component.changed
    on_objective = await report_on(stack, (await reply_of(stack, inst, 1)).name, OBJ)
    assert on_objective.snapshot.component.text == ws0.objective.text and not on_objective.snapshot.component.changed
    # Later turns change the artifact; Clear chat removes every message, snapshot and version: the report
    # still shows the component as its turn left it.
    await stack.chat().SendMessage(chat_pb2.SendMessageRequest(
        instance=inst, content="Please revise the changelog with the new flags.", request_id=rid()), metadata=stack.md())
    await stack.chat().ClearMessages(chat_pb2.ClearMessagesRequest(parent=inst), metadata=stack.md())
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().GetArtifact(chat_pb2.GetArtifactRequest(name=f"{inst}/artifacts/2"), metadata=stack.md())
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    for r in (on_artifact, on_plan, on_objective):
        got = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=r.name), metadata=stack.md())
        assert got.snapshot.component == r.snapshot.component and got.component == r.component


async def test_a_report_naming_no_component_of_its_turn_is_refused_and_nothing_is_written(stack: Stack):
    inst = await conversation(stack, WRITE_TWO)
    reply = (await reply_of(stack, inst, 0)).name
    for scope, artifact, field in ((ART, "7", "feedback.component.artifact_id"), (ART, "x", "feedback.component.artifact_id"),
                                   (ART, "", "feedback.component.artifact_id"), (OBJ, "1", "feedback.component.artifact_id"),
                                   (pb.RATING_SCOPE_MESSAGE, "", "feedback.component.scope")):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await report_on(stack, reply, scope, artifact)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details(), (scope, artifact)
    listed = await stack.feedback().ListFeedback(pb.ListFeedbackRequest(instance=inst), metadata=stack.md())
    assert list(listed.feedback) == []
    plain = await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(feedback=pb.Feedback(
        message=reply, body="the reply itself"), request_id=rid()), metadata=stack.md())
    assert not plain.HasField("component") and not plain.snapshot.HasField("component")
