"""Operator statistics over real gRPC, the real chat gateway and PostgreSQL (issue 13): the headline,
the per-dimension split and daily series, the completion funnel — and that branch copies never move a
figure, while editing a copy (the owner's own opinion now) does."""
from __future__ import annotations

import datetime as dt
import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf import field_mask_pb2

from tests.stack import Stack, new_conversation

POS, NEU, NEG = pb.RATING_SENTIMENT_POSITIVE, pb.RATING_SENTIMENT_NEUTRAL, pb.RATING_SENTIMENT_NEGATIVE
MSG, CONV = pb.RATING_SCOPE_MESSAGE, pb.RATING_SCOPE_CONVERSATION


def rid() -> str:
    return str(uuid.uuid4())


async def put(stack: Stack, inst: str, turn: int, scope: int, aspect: str, sentiment: int, choice: str = "",
              sub: str = "alice") -> pb.Rating:
    paths = ["sentiment"] + (["choice"] if choice else [])
    return await stack.feedback().PutRating(pb.PutRatingRequest(
        rating=pb.Rating(conversation=inst, turn_index=turn, scope=scope, aspect=aspect, sentiment=sentiment,
                         choice=choice),
        update_mask=field_mask_pb2.FieldMask(paths=paths), request_id=rid()), metadata=stack.md(sub))


async def report(stack: Stack, message: str, sub: str = "alice") -> pb.Feedback:
    return await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=message, body="wrong", sentiment=pb.SENTIMENT_BAD), request_id=rid()),
        metadata=stack.md(sub))


async def stats(stack: Stack, days: int = 7) -> pb.FeedbackStats:
    return await stack.feedback().GetFeedbackStats(pb.GetFeedbackStatsRequest(window_days=days),
                                                   metadata=stack.md("ops"))


def figures(s: pb.FeedbackStats) -> pb.FeedbackStats:
    """Everything a chart shows (the window's end time moves with the clock)."""
    out = pb.FeedbackStats()
    out.CopyFrom(s)
    out.ClearField("end_time")
    return out


async def test_headline_dimensions_daily_series_and_funnel_equal_what_was_said(stack: Stack):
    a, a_sent = await new_conversation(stack, 2, "alice")
    b, b_sent = await new_conversation(stack, 1, "bob")
    c, _ = await new_conversation(stack, 1, "carol")
    await put(stack, a, 0, MSG, "reaction", POS)
    await put(stack, a, 1, MSG, "reaction", NEG)
    await put(stack, b, 0, MSG, "reaction", POS, sub="bob")
    # Alice first said "partly", then "complete" (her latest answer counts); Bob answered "not_done";
    # Carol only reported.
    await put(stack, a, 0, CONV, "task_completion", NEU, "partly")
    await put(stack, a, 1, CONV, "task_completion", POS, "complete")
    await put(stack, b, 0, CONV, "task_completion", NEG, "not_done", sub="bob")
    await report(stack, a_sent[1].reply.name)
    await report(stack, (await new_conversation(stack, 1, "carol"))[1][0].reply.name, "carol")
    s = await stats(stack)
    assert s.window_days == 7
    h = s.headline
    assert (h.likes, h.dislikes, h.reports, h.tasks_completed) == (2, 1, 2, 1)
    dims = {(d.scope, d.aspect): d for d in s.dimensions}
    assert set(dims) == {(MSG, "reaction"), (CONV, "task_completion")}
    r, t = dims[(MSG, "reaction")], dims[(CONV, "task_completion")]
    assert (r.positive, r.neutral, r.negative) == (2, 0, 1) and (t.positive, t.neutral, t.negative) == (1, 1, 1)
    today = dt.datetime.now(dt.UTC).date()
    for d in (r, t):
        assert [x.day for x in d.daily] == [(today - dt.timedelta(days=6 - i)).isoformat() for i in range(7)]
        assert sum(x.positive + x.neutral + x.negative for x in d.daily[:-1]) == 0
        last = d.daily[-1]
        assert (last.positive, last.neutral, last.negative) == (d.positive, d.neutral, d.negative)
    f = s.funnel
    # Engaged: alice, bob, and carol's conversation with a report (carol's first conversation is silent).
    assert (f.engaged, f.with_completion_answer, f.marked_complete) == (3, 2, 1)
    assert {x.choice: x.count for x in f.latest_state} == {"complete": 1, "not_done": 1}
    assert c not in str(s)  # per-conversation ids never appear in the figures


async def test_the_stats_vocabulary_comes_from_the_request(stack: Stack):
    inst, _ = await new_conversation(stack)
    await put(stack, inst, 0, CONV, "goal_reached", POS, "yes")
    default = await stats(stack)
    assert default.funnel.with_completion_answer == 0
    custom = await stack.feedback().GetFeedbackStats(pb.GetFeedbackStatsRequest(
        window_days=7, completion_aspect="goal_reached", complete_choice="yes"), metadata=stack.md("ops"))
    assert (custom.funnel.with_completion_answer, custom.funnel.marked_complete, custom.headline.tasks_completed) == (
        1, 1, 1)


@pytest.mark.parametrize("days", [0, 1, 365])
async def test_the_window_is_1_to_365_days(stack: Stack, days: int):
    s = await stats(stack, days)
    assert s.window_days == (days or 30) and len(s.trend) == (days or 30)


@pytest.mark.parametrize("days", [-1, 366])
async def test_a_window_outside_1_to_365_days_is_refused_naming_it(stack: Stack, days: int):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stats(stack, days)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "window_days" in e.value.details()


async def test_branch_copies_never_move_any_figure_and_editing_a_copy_does(stack: Stack):
    parent, _ = await new_conversation(stack, 2)
    await put(stack, parent, 0, MSG, "reaction", POS)
    await put(stack, parent, 1, CONV, "task_completion", POS, "complete")
    before = figures(await stats(stack))
    res = await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=parent, turn_index=1, request_id=rid()), metadata=stack.md())
    fork = res.instance.name
    assert res.copied_rating_count == 2
    assert figures(await stats(stack)) == before  # the copies moved nothing: not a figure, not a day
    recent = await stack.feedback().ListRecentFeedback(pb.ListRecentFeedbackRequest(), metadata=stack.md("ops"))
    assert {i.rating.conversation for i in recent.items} == {parent}  # copies are not in the feed either
    # The owner edits the copied completion answer: now it is theirs and counts.
    copied = (await stack.feedback().ListRatings(pb.ListRatingsRequest(conversation=fork), metadata=stack.md()))
    (completion,) = [r for r in copied.ratings if r.aspect == "task_completion"]
    assert completion.origin == pb.RATING_ORIGIN_BRANCH_COPY
    edited = await put(stack, fork, 1, CONV, "task_completion", NEG, "not_done")
    assert edited.name == completion.name and edited.origin == pb.RATING_ORIGIN_USER
    after = await stats(stack)
    dim = {d.aspect: d for d in after.dimensions}["task_completion"]
    assert (dim.positive, dim.negative) == (1, 1)
    assert (after.funnel.engaged, after.funnel.with_completion_answer, after.funnel.marked_complete) == (2, 2, 1)
    # The untouched copied reaction still counts nowhere.
    assert {d.aspect: d for d in after.dimensions}["reaction"].positive == 1
