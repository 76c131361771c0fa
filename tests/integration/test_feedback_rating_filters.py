"""ListRatings' filters and its every-conversation form (issue 28: the review queue's negative judgements)
over real gRPC, the real chat gateway and PostgreSQL: `instances/-` lists the caller's ratings of every
conversation newest first (never another owner's), filtered by sentiment, reason, update time and origin,
paged with tokens bound to the filters; one conversation's listing takes the same filters; bad filters name
their fields."""
from __future__ import annotations

import datetime as dt
import uuid

import grpc
import pytest
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf import field_mask_pb2, timestamp_pb2

from tests.helpers.feedback import expect_error
from tests.stack import Stack, all_pages, new_conversation

POS, NEG = pb.RATING_SENTIMENT_POSITIVE, pb.RATING_SENTIMENT_NEGATIVE
EVERY = "instances/-"


async def put(stack: Stack, conversation: str, turn: int, aspect: str, sentiment: int, reasons=(),
              sub: str = "alice") -> pb.Rating:
    return await stack.feedback().PutRating(pb.PutRatingRequest(
        rating=pb.Rating(conversation=conversation, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect=aspect,
                         sentiment=sentiment, reasons=list(reasons)),
        update_mask=field_mask_pb2.FieldMask(paths=["sentiment", "reasons"]), request_id=str(uuid.uuid4())),
        metadata=stack.md(sub))


def listing(stack: Stack, sub: str = "alice", **fields):
    return stack.feedback().ListRatings(pb.ListRatingsRequest(**fields), metadata=stack.md(sub))


async def test_every_conversation_newest_first_filtered_and_owner_scoped(stack: Stack):
    a, _ = await new_conversation(stack, turns=2)
    b, _ = await new_conversation(stack)
    bob, _ = await new_conversation(stack, sub="bob")
    r1 = await put(stack, a, 0, "reply_judgement", NEG, ["misunderstood"])
    r2 = await put(stack, b, 0, "reply_judgement", POS)
    r3 = await put(stack, a, 1, "accuracy", NEG, ["ignored_constraints", "misunderstood"])
    await put(stack, bob, 0, "reply_judgement", NEG, ["misunderstood"], sub="bob")
    everything = (await listing(stack, conversation=EVERY)).ratings
    assert [r.name for r in everything] == [r3.name, r2.name, r1.name]  # newest first, only alice's
    negative = (await listing(stack, conversation=EVERY, sentiment=NEG)).ratings
    assert [r.name for r in negative] == [r3.name, r1.name]
    by_reason = (await listing(stack, conversation=EVERY, reason="ignored_constraints")).ratings
    assert [r.name for r in by_reason] == [r3.name]
    since = timestamp_pb2.Timestamp()
    since.FromDatetime(r2.update_time.ToDatetime(dt.UTC))
    recent = (await listing(stack, conversation=EVERY, start_time=since)).ratings
    assert [r.name for r in recent] == [r3.name, r2.name]
    users = (await listing(stack, conversation=EVERY, origin=pb.RATING_ORIGIN_USER, sentiment=NEG)).ratings
    assert [r.name for r in users] == [r3.name, r1.name]
    # One conversation takes the same filters, in its own order.
    one = (await listing(stack, conversation=a, sentiment=NEG, reason="misunderstood")).ratings
    assert [r.name for r in one] == [r1.name, r3.name]
    assert (await listing(stack, conversation=a, sentiment=POS)).ratings == []


async def test_every_conversation_pages_with_tokens_bound_to_the_filters(stack: Stack):
    convs = [(await new_conversation(stack))[0] for _ in range(3)]
    made = [await put(stack, c, 0, aspect, NEG) for c in convs for aspect in ("reply_judgement", "accuracy")]
    paged = await all_pages(stack.feedback().ListRatings, pb.ListRatingsRequest(conversation=EVERY, sentiment=NEG,
                                                                               page_size=4), "ratings", stack.md())
    assert [r.name for r in paged] == [r.name for r in reversed(made)]
    first = await listing(stack, conversation=EVERY, sentiment=NEG, page_size=2)
    assert first.next_page_token
    e = await expect_error(listing(stack, conversation=EVERY, sentiment=POS, page_token=first.next_page_token),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert "page_token" in e.details()


@pytest.mark.parametrize(("fields", "field_path"), [
    ({"conversation": EVERY, "turn_index": 0}, "turn_index"),
    ({"conversation": EVERY, "reason": "Not A Slug"}, "reason"),
    ({"conversation": EVERY, "sentiment": 99}, "sentiment"),
    ({"conversation": EVERY, "origin": 99}, "origin"),
    ({"conversation": EVERY, "start_time": timestamp_pb2.Timestamp(seconds=-(10 ** 12))}, "start_time"),
    ({"conversation": "instances/"}, "conversation"),
])
async def test_bad_filters_name_their_fields(stack: Stack, fields, field_path):
    e = await expect_error(listing(stack, **fields), grpc.StatusCode.INVALID_ARGUMENT)
    assert field_path in e.details()
