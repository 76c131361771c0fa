"""The Agents list's reads (issue 28) over real gRPC and PostgreSQL: ListInstances orders by latest
activity (an agent's last turn, else its creation), searches display names case-insensitively on the
server (a `%` or `_` is a character, not a wildcard), counts each instance's turns (ClearMessages lowers
it, a fork counts its copied prefix), keeps a page token bound to its search and order, and names a bad
`search` / `order_by`; CountConversationFeedback gives the caller's own reports and ratings per
conversation (branch copies and another owner's words count zero) and refuses more than 100 names.
"""
from __future__ import annotations

import uuid

import grpc

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.errors import error_info
from tests.helpers.feedback import expect_error

ACTIVITY = "last_activity_time desc"
INVALID = grpc.StatusCode.INVALID_ARGUMENT


async def _instance(stack, name: str, sub: str = "alice") -> str:
    inst = await stack.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name=name, agent="reference"), request_id=str(uuid.uuid4())), metadata=stack.md(sub))
    return inst.name


async def _turn(stack, inst: str, text: str = "What is the weather?", sub: str = "alice") -> chat_pb2.SendMessageResponse:
    return await stack.chat().SendMessage(chat_pb2.SendMessageRequest(instance=inst, content=text, request_id=str(uuid.uuid4())),
                                          metadata=stack.md(sub))


async def _list(stack, sub: str = "alice", **kw) -> list[chat_pb2.Instance]:
    got, token = [], ""
    while True:
        page = await stack.chat().ListInstances(chat_pb2.ListInstancesRequest(page_token=token, **kw), metadata=stack.md(sub))
        got += page.instances
        token = page.next_page_token
        if not token:
            return got


async def test_instances_by_latest_activity_with_turn_counts_and_search(stack):
    old = await _instance(stack, "Ops desk")
    mid = await _instance(stack, "Docs 100%_ready")
    new = await _instance(stack, "ops night shift")
    await _instance(stack, "Ops desk", sub="bob")  # another owner's: never listed for alice
    for _ in range(2):
        await _turn(stack, old)  # the oldest agent is now the most recently active one
    by_activity = await _list(stack, order_by=ACTIVITY, page_size=1)
    assert [i.name for i in by_activity] == [old, new, mid]
    first = by_activity[0]
    assert first.turn_count == 2 and first.HasField("last_turn_time")
    assert first.last_turn_time.ToDatetime() >= first.create_time.ToDatetime()
    assert not by_activity[1].HasField("last_turn_time") and by_activity[1].turn_count == 0
    # The default order is unchanged (oldest first) and carries the same figures.
    assert [(i.name, i.turn_count) for i in await _list(stack)] == [(old, 2), (mid, 0), (new, 0)]

    # Search: case-insensitive substring of the display name, on the server, paged with its order.
    assert [i.name for i in await _list(stack, search="OPS", order_by=ACTIVITY, page_size=1)] == [old, new]
    assert [i.name for i in await _list(stack, search="  night ")] == [new]
    assert [i.name for i in await _list(stack, search="100%_")] == [mid]
    assert [i.name for i in await _list(stack, search="%")] == [mid]
    assert await _list(stack, search="nobody") == []

    # A page token is bound to its search and order: another search or order is refused, naming it.
    page = await stack.chat().ListInstances(chat_pb2.ListInstancesRequest(search="ops", page_size=1), metadata=stack.md())
    for other in ({"search": "desk"}, {"search": "ops", "order_by": ACTIVITY}):
        e = await expect_error(stack.chat().ListInstances(chat_pb2.ListInstancesRequest(
            page_size=1, page_token=page.next_page_token, **other), metadata=stack.md()), INVALID)
        assert error_info(e).metadata["field"] == "page_token"

    for bad, field in (({"search": "x" * 101}, "search"), ({"search": "a\x00"}, "search"),
                       ({"order_by": "display_name"}, "order_by")):
        e = await expect_error(stack.chat().ListInstances(chat_pb2.ListInstancesRequest(**bad), metadata=stack.md()), INVALID)
        assert error_info(e).metadata["field"] == field
        assert "x" * 101 not in e.details()


async def test_turn_counts_follow_clear_and_forks(stack):
    inst = await _instance(stack, "Forked")
    for _ in range(3):
        await _turn(stack, inst)
    fork = await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=inst, turn_index=1, request_id=str(uuid.uuid4())), metadata=stack.md())
    listed = {i.name: i for i in await _list(stack, order_by=ACTIVITY)}
    assert listed[fork.instance.name].turn_count == 2 and listed[fork.instance.name].fork_source == inst
    assert listed[inst].turn_count == 3
    # The fork is newer than the source's last turn: it is listed first.
    assert [i.name for i in await _list(stack, order_by=ACTIVITY)] == [fork.instance.name, inst]
    await stack.chat().ClearMessages(chat_pb2.ClearMessagesRequest(parent=inst), metadata=stack.md())
    listed = {i.name: i for i in await _list(stack)}
    assert listed[inst].turn_count == 0 and listed[inst].HasField("last_turn_time")


async def test_count_conversation_feedback_is_the_callers_own(stack):
    a = await _instance(stack, "Counted")
    quiet = await _instance(stack, "Quiet")
    t = await _turn(stack, a)
    await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=t.reply.name, body="Wrong city.", surface=pb.SURFACE_CHAT),
        request_id=str(uuid.uuid4())), metadata=stack.md())
    for aspect in ("reaction", "reply_judgement"):
        await stack.feedback().PutRating(pb.PutRatingRequest(
            rating=pb.Rating(conversation=a, turn_index=0, scope=pb.RATING_SCOPE_MESSAGE, aspect=aspect,
                             sentiment=pb.RATING_SENTIMENT_NEGATIVE),
            update_mask={"paths": ["sentiment"]}, request_id=str(uuid.uuid4())), metadata=stack.md())
    # A fork copies the ratings as BRANCH_COPY: the fork counts none of them.
    fork = await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=a, turn_index=0, request_id=str(uuid.uuid4())), metadata=stack.md())
    got = await stack.feedback().CountConversationFeedback(pb.CountConversationFeedbackRequest(
        conversations=[quiet, a, fork.instance.name, a]), metadata=stack.md())
    assert [(c.conversation, c.reports, c.ratings) for c in got.counts] == [(quiet, 0, 0), (a, 1, 2), (fork.instance.name, 0, 0)]
    bob = await stack.feedback().CountConversationFeedback(pb.CountConversationFeedbackRequest(conversations=[a]),
                                                           metadata=stack.md("bob"))
    assert [(c.reports, c.ratings) for c in bob.counts] == [(0, 0)]
    for names, field in (([], "conversations"), ([a] * 101, "conversations"), ([a, "messages/x"], "conversations[1]")):
        e = await expect_error(stack.feedback().CountConversationFeedback(
            pb.CountConversationFeedbackRequest(conversations=names), metadata=stack.md()), INVALID)
        assert error_info(e).metadata["field"] == field
