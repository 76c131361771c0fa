"""Multi-aspect judgements over real gRPC, the real chat gateway and PostgreSQL (issue 13): what a rating
can hold now (reasons, a multi-state choice, the live document) and how an operator reads it back."""
from __future__ import annotations

import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf import field_mask_pb2

from tests.stack import Stack, new_conversation

POS, NEU, NEG = pb.RATING_SENTIMENT_POSITIVE, pb.RATING_SENTIMENT_NEUTRAL, pb.RATING_SENTIMENT_NEGATIVE


def rid() -> str:
    return str(uuid.uuid4())


async def put(stack: Stack, mask: list[str] | None = None, sub: str = "alice", **fields) -> pb.Rating:
    req = pb.PutRatingRequest(rating=pb.Rating(**fields), request_id=rid())
    if mask:
        req.update_mask.CopyFrom(field_mask_pb2.FieldMask(paths=mask))
    return await stack.feedback().PutRating(req, metadata=stack.md(sub))


async def test_reasons_and_choice_are_stored_and_each_control_owns_only_its_field(stack: Stack):
    inst, _ = await new_conversation(stack)
    key = dict(conversation=inst, turn_index=0, scope=pb.RATING_SCOPE_MESSAGE, aspect="reply_judgement")
    first = await put(stack, ["sentiment"], sentiment=NEG, **key)
    # The reasons control sends other values for every field but owns only `reasons`.
    with_reasons = await put(stack, ["reasons"], sentiment=POS, note="x", reasons=["misunderstood",
                             "ignored_constraints"], **key)
    assert with_reasons.sentiment == NEG and with_reasons.note == ""
    assert list(with_reasons.reasons) == ["ignored_constraints", "misunderstood"]  # a set, returned sorted
    with_choice = await put(stack, ["choice"], choice="did_not_work", reasons=[], **key)
    assert with_choice.choice == "did_not_work" and list(with_choice.reasons) == ["ignored_constraints",
                                                                                  "misunderstood"]
    noted = await put(stack, ["note"], note="it ignored my 200-word limit", **key)
    assert (noted.sentiment, noted.choice, list(noted.reasons)) == (NEG, "did_not_work",
                                                                    ["ignored_constraints", "misunderstood"])
    assert noted.version == first.version + 3
    # A default put (no mask) owns sentiment, category and note as before: reasons and choice stay.
    plain = await put(stack, sentiment=NEU, **key)
    assert plain.choice == "did_not_work" and len(plain.reasons) == 2
    cleared = await put(stack, ["reasons"], reasons=[], **key)
    assert list(cleared.reasons) == [] and cleared.choice == "did_not_work"
    listed = (await stack.feedback().ListRatings(pb.ListRatingsRequest(conversation=inst),
                                                 metadata=stack.md())).ratings
    assert [(r.choice, list(r.reasons)) for r in listed] == [("did_not_work", [])]


@pytest.mark.parametrize(("fields", "field_path"), [
    ({"reasons": ["Not A Slug"]}, "rating.reasons"),
    ({"reasons": [f"r{i}" for i in range(17)]}, "rating.reasons"),
    ({"reasons": ["same", "same"]}, "rating.reasons"),
    ({"choice": "two words"}, "rating.choice"),
])
async def test_reasons_and_choice_shapes_are_checked_naming_the_field(stack: Stack, fields, field_path):
    inst, _ = await new_conversation(stack)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await put(stack, list(fields), conversation=inst, turn_index=0, scope=pb.RATING_SCOPE_CONVERSATION,
                  aspect="overall", **fields)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field_path in e.value.details()


async def test_a_four_state_completion_answer_aggregates_by_the_sentiment_it_maps_to(stack: Stack):
    states = [("complete", POS), ("partly", NEU), ("not_done", NEG), ("not_attempted", NEG)]
    for choice, sentiment in states:
        inst, _ = await new_conversation(stack)
        got = await put(stack, ["choice", "sentiment"], conversation=inst, turn_index=0,
                        scope=pb.RATING_SCOPE_CONVERSATION, aspect="task_completion", choice=choice,
                        sentiment=sentiment)
        assert (got.choice, got.sentiment) == (choice, sentiment)
    stats = await stack.feedback().GetFeedbackStats(pb.GetFeedbackStatsRequest(window_days=1),
                                                    metadata=stack.md("ops"))
    (dim,) = [d for d in stats.dimensions if d.aspect == "task_completion"]
    assert (dim.scope, dim.positive, dim.neutral, dim.negative) == (pb.RATING_SCOPE_CONVERSATION, 1, 1, 2)
    assert {c.choice: c.count for c in stats.funnel.latest_state} == {s: 1 for s, _ in states}
    assert stats.headline.tasks_completed == 1


async def test_the_live_document_and_each_artifact_of_a_turn_are_rated_independently(stack: Stack):
    inst, _ = await new_conversation(stack, turns=0)
    # A turn that writes two artifacts (ids 1 and 2): an artifact id must name one of the conversation's.
    await stack.chat().SendMessage(chat_pb2.SendMessageRequest(
        instance=inst, content="Write a summary and a checklist.", request_id=rid()), metadata=stack.md())
    key = dict(conversation=inst, turn_index=0, scope=pb.RATING_SCOPE_ARTIFACT, aspect="artifact_quality")
    live = await put(stack, artifact_id="0", sentiment=POS, **key)
    a1 = await put(stack, artifact_id="1", sentiment=NEG, **key)
    a2 = await put(stack, artifact_id="2", sentiment=NEU, **key)
    assert len({live.name, a1.name, a2.name}) == 3 and live.artifact_id == "0"
    again = await put(stack, artifact_id="0", sentiment=NEG, **key)
    assert again.name == live.name and again.version == 2
    listed = (await stack.feedback().ListRatings(pb.ListRatingsRequest(conversation=inst),
                                                 metadata=stack.md())).ratings
    assert [(r.artifact_id, r.sentiment) for r in listed] == [("0", NEG), ("1", NEG), ("2", NEU)]


async def test_a_report_category_from_a_newer_client_is_stored_and_filed_as_other(stack: Stack):
    inst, sent = await new_conversation(stack)
    fb = await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(feedback=pb.Feedback(
        message=sent[0].reply.name, body="the chart overlaps the text", category=42), request_id=rid()),
        metadata=stack.md())
    assert fb.category == 42
    got = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert got.category == 42
    filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    ticket = open(filed.issue_url.removeprefix("file://")).read()
    assert "[feedback] other:" in ticket and "- category: other" in ticket


async def test_the_operator_feed_returns_reasons_and_choices_and_filters_by_them(stack: Stack):
    inst, _ = await new_conversation(stack, 2)
    await put(stack, ["sentiment", "reasons", "choice"], conversation=inst, turn_index=0,
              scope=pb.RATING_SCOPE_MESSAGE, aspect="reply_judgement", sentiment=NEG, choice="did_not_work",
              reasons=["ignored_constraints"])
    await put(stack, ["sentiment", "choice"], conversation=inst, turn_index=1, scope=pb.RATING_SCOPE_MESSAGE,
              aspect="reply_judgement", sentiment=POS, choice="worked_well")
    md = stack.md("ops")
    by_reason = await stack.feedback().ListRecentFeedback(pb.ListRecentFeedbackRequest(reason="ignored_constraints"),
                                                          metadata=md)
    assert [(i.rating.turn_index, list(i.rating.reasons), i.rating.choice) for i in by_reason.items] == [
        (0, ["ignored_constraints"], "did_not_work")]
    by_choice = await stack.feedback().ListRecentFeedback(pb.ListRecentFeedbackRequest(choice="worked_well"),
                                                          metadata=md)
    assert [i.rating.turn_index for i in by_choice.items] == [1]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.feedback().ListRecentFeedback(pb.ListRecentFeedbackRequest(reason="Bad Slug"), metadata=md)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "reason" in e.value.details()


async def test_the_per_turn_view_shows_everything_one_user_said_about_one_turn(stack: Stack):
    inst, sent = await new_conversation(stack, 2)
    await put(stack, conversation=inst, turn_index=1, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
              sentiment=NEG)
    await put(stack, ["choice", "sentiment"], conversation=inst, turn_index=1, scope=pb.RATING_SCOPE_CONVERSATION,
              aspect="task_completion", choice="partly", sentiment=NEU)
    await put(stack, conversation=inst, turn_index=0, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
              sentiment=POS)
    fb = await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(feedback=pb.Feedback(
        message=sent[1].reply.name, body="this one is wrong"), request_id=rid()), metadata=stack.md())
    view = await stack.feedback().GetTurnFeedback(
        pb.GetTurnFeedbackRequest(conversation=inst, turn_index=1, user="alice"), metadata=stack.md("ops"))
    assert [(r.aspect, r.choice) for r in view.ratings] == [("reaction", ""), ("task_completion", "partly")]
    assert [f.name for f in view.feedback] == [fb.name] and view.feedback[0].body == "this one is wrong"
    empty = await stack.feedback().GetTurnFeedback(
        pb.GetTurnFeedbackRequest(conversation=inst, turn_index=1, user="bob"), metadata=stack.md("ops"))
    assert list(empty.ratings) == [] and list(empty.feedback) == []
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.feedback().GetTurnFeedback(
            pb.GetTurnFeedbackRequest(conversation=inst, turn_index=1, user="alice"),
            metadata=stack.md("alice", ("feedback:read",)))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
