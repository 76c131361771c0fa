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
