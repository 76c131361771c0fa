"""ForkConversation over real gRPC, the real chat gateway, feedback service and PostgreSQL (issue 13):
what an owner notices when they branch a conversation at a turn."""
from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as fpb

from services.common.auth import SCOPE_CHAT
from tests.stack import Stack, new_conversation


def rid() -> str:
    return str(uuid.uuid4())


async def fork(stack: Stack, parent: str, turn: int, sub: str = "alice", **kw) -> chat_pb2.ForkConversationResponse:
    kw.setdefault("request_id", rid())
    return await stack.chat().ForkConversation(
        chat_pb2.ForkConversationRequest(parent=parent, turn_index=turn, **kw), metadata=stack.md(sub))


async def messages(stack: Stack, instance: str, sub: str = "alice") -> list[chat_pb2.Message]:
    return list((await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=instance),
                                                 metadata=stack.md(sub))).messages)


async def rate(stack: Stack, conversation: str, turn: int, sentiment: int, aspect: str = "reaction",
               scope: int = fpb.RATING_SCOPE_MESSAGE) -> fpb.Rating:
    return await stack.feedback().PutRating(fpb.PutRatingRequest(
        rating=fpb.Rating(conversation=conversation, turn_index=turn, scope=scope, aspect=aspect,
                          sentiment=sentiment), request_id=rid()), metadata=stack.md())


async def ratings(stack: Stack, conversation: str) -> list[fpb.Rating]:
    return list((await stack.feedback().ListRatings(fpb.ListRatingsRequest(conversation=conversation),
                                                    metadata=stack.md())).ratings)


async def test_fork_copies_the_prefix_with_new_ids_and_pointers_to_the_source(stack: Stack):
    parent, sent = await new_conversation(stack, 3)
    res = await fork(stack, parent, 1, display_name="Try another way")
    f = res.instance
    assert f.name != parent and f.fork_source == parent and f.fork_turn_index == 1 and f.owner == "alice"
    assert f.display_name == "Try another way" and res.copied_message_count == 4
    src = [m for m in await messages(stack, parent) if m.turn_index <= 1]
    copies = await messages(stack, f.name)
    assert [(m.role, m.content, m.turn_index) for m in copies] == [(m.role, m.content, m.turn_index) for m in src]
    assert all(c.name.startswith(f.name + "/messages/") for c in copies)
    assert {c.name.split("/")[-1] for c in copies}.isdisjoint({m.name.split("/")[-1] for m in src})
    assert [c.source_message for c in copies] == [m.name for m in src]
    assert [c.source_trace_id for c in copies] == [m.trace_id for m in src] == [c.trace_id for c in copies]
    # The fork goes on from turn 2 with its own trace; the parent is untouched.
    nxt = await stack.chat().SendMessage(chat_pb2.SendMessageRequest(instance=f.name, content="and now?"),
                                         metadata=stack.md())
    assert nxt.user_message.turn_index == 2 and nxt.trace_id not in {s.trace_id for s in sent}
    assert len(await messages(stack, parent)) == 6


async def test_fork_of_a_fork_points_at_its_immediate_source_and_keeps_the_original_trace(stack: Stack):
    parent, sent = await new_conversation(stack, 2)
    first = (await fork(stack, parent, 1)).instance
    second = (await fork(stack, first.name, 0)).instance
    assert second.fork_source == first.name
    copies = await messages(stack, second.name)
    first_copies = await messages(stack, first.name)
    assert [c.source_message for c in copies] == [m.name for m in first_copies[:2]]
    assert {c.trace_id for c in copies} == {c.source_trace_id for c in copies} == {sent[0].trace_id}


async def test_a_retried_fork_returns_the_same_fork_and_copies_nothing_twice(stack: Stack):
    parent, sent = await new_conversation(stack, 2)
    await rate(stack, parent, 0, fpb.RATING_SENTIMENT_POSITIVE)
    await rate(stack, parent, 1, fpb.RATING_SENTIMENT_NEGATIVE, aspect="task_completion",
               scope=fpb.RATING_SCOPE_CONVERSATION)
    request_id = rid()
    one = await fork(stack, parent, 1, request_id=request_id)
    two = await fork(stack, parent, 1, request_id=request_id)
    assert one.instance == two.instance and one.copied_rating_count == 2 and two.copied_rating_count == 0
    assert len(await messages(stack, one.instance.name)) == 4
    copied = await ratings(stack, one.instance.name)
    assert sorted(r.turn_index for r in copied) == [0, 1]
    assert {r.origin for r in copied} == {fpb.RATING_ORIGIN_BRANCH_COPY}
    # The copied MESSAGE rating names the fork's own copy of the reply.
    (msg_rating,) = [r for r in copied if r.scope == fpb.RATING_SCOPE_MESSAGE]
    assert msg_rating.message.startswith(one.instance.name + "/messages/")
    # Even after the owner deleted a copy, a retry of the fork copies nothing again.
    await stack.feedback().DeleteRating(fpb.DeleteRatingRequest(name=msg_rating.name), metadata=stack.md())
    three = await fork(stack, parent, 1, request_id=request_id)
    assert three.copied_rating_count == 0 and len(await ratings(stack, one.instance.name)) == 1
    # The same request id with another request is refused, nothing written.
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await fork(stack, parent, 0, request_id=request_id)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "request_id" in e.value.details()


async def test_deleting_or_clearing_the_parent_leaves_the_fork_intact(stack: Stack):
    parent, sent = await new_conversation(stack, 2)
    await rate(stack, parent, 0, fpb.RATING_SENTIMENT_POSITIVE)
    f = (await fork(stack, parent, 1)).instance
    await stack.chat().DeleteTurn(chat_pb2.DeleteTurnRequest(parent=parent, trace_id=sent[0].trace_id),
                                  metadata=stack.md())
    await stack.chat().ClearMessages(chat_pb2.ClearMessagesRequest(parent=parent), metadata=stack.md())
    assert await messages(stack, parent) == []
    copies = await messages(stack, f.name)
    assert len(copies) == 4 and copies[0].source_message.startswith(parent + "/messages/")
    assert [r.origin for r in await ratings(stack, f.name)] == [fpb.RATING_ORIGIN_BRANCH_COPY]


async def test_forking_is_owner_scoped_and_names_what_is_wrong(stack: Stack):
    parent, _ = await new_conversation(stack, 1)
    for sub, turn, code in (("bob", 0, grpc.StatusCode.NOT_FOUND), ("alice", 5, grpc.StatusCode.NOT_FOUND),
                            ("alice", -1, grpc.StatusCode.INVALID_ARGUMENT)):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await fork(stack, parent, turn, sub=sub)
        assert e.value.code() == code, (sub, turn)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await fork(stack, parent, 0, instance_id="Not A Slug")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "instance_id" in e.value.details()
    # Bob sees no fork of Alice's; a chat-only token forks the messages (its ratings are not its to write).
    chat_only = await stack.chat().ForkConversation(
        chat_pb2.ForkConversationRequest(parent=parent, turn_index=0, request_id=rid()),
        metadata=stack.md("alice", (SCOPE_CHAT,)))
    assert chat_only.copied_message_count == 2 and chat_only.copied_rating_count == 0
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().GetInstance(chat_pb2.GetInstanceRequest(name=chat_only.instance.name),
                                       metadata=stack.md("bob"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


async def test_feedback_on_a_copied_reply_freezes_the_original_turns_tool_calls(stack: Stack):
    parent, sent = await new_conversation(stack, 2)
    f = (await fork(stack, parent, 1)).instance
    copy = [m for m in await messages(stack, f.name) if m.role == chat_pb2.ROLE_ASSISTANT][0]
    fb = await stack.feedback().CreateFeedback(fpb.CreateFeedbackRequest(
        feedback=fpb.Feedback(message=copy.name, body="this answer was wrong"), request_id=rid()),
        metadata=stack.md())
    assert fb.message == copy.name and fb.snapshot.trace_id == sent[0].trace_id
    assert fb.snapshot.target_text == sent[0].reply.content
    original = await stack.wait_trace(sent[0].trace_id, min_spans=3)
    for _ in range(100):
        got = await stack.feedback().GetFeedback(fpb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
        if got.trace_snapshot.state == fpb.TRACE_SNAPSHOT_STATE_CAPTURED:
            break
        await asyncio.sleep(0.2)
    assert got.trace_snapshot.state == fpb.TRACE_SNAPSHOT_STATE_CAPTURED
    assert [c.name for c in got.trace_snapshot.tool_calls] == ["recall_transcript"]
    tool_span_ids = {s.span_id for s in original.spans if s.name == "tool.call"}
    assert {c.span_id for c in got.trace_snapshot.tool_calls} == tool_span_ids
