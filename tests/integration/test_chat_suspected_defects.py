"""Suspected defects over real gRPC, the real reference agent and PostgreSQL (issue 13): the turns in
which the platform caught its own agent misbehaving, listed apart from what people said."""
from __future__ import annotations

import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as fpb

from services.common.auth import SCOPE_CHAT, SCOPE_FEEDBACK_ADMIN
from tests.stack import Stack, all_pages

TRUNCATING = "how many agents do you have in total? Give me their names."  # list_subordinates > 4096 bytes
INVENTING = "Please send the weekly report to my team."  # the scripted reply claims send_report's result


async def new_instance(stack: Stack, sub: str = "alice") -> str:
    return (await stack.chat().CreateInstance(
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="Agent", agent="reference")),
        metadata=stack.md(sub))).name


async def say(stack: Stack, instance: str, content: str, sub: str = "alice") -> chat_pb2.SendMessageResponse:
    return await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=instance, content=content, request_id=str(uuid.uuid4())),
        metadata=stack.md(sub))


async def defects(stack: Stack, parent: str, sub: str = "alice", scopes=None, page_size: int = 0):
    md = stack.md(sub) if scopes is None else stack.md(sub, scopes)
    return await all_pages(stack.chat().ListSuspectedDefects,
                           chat_pb2.ListSuspectedDefectsRequest(parent=parent, page_size=page_size), "suspected_defects", md)


async def test_truncated_and_invented_turns_are_listed_with_trace_time_event_and_user_message(stack: Stack):
    inst = await new_instance(stack)
    clean = await say(stack, inst, "hello there")
    cut = await say(stack, inst, TRUNCATING)
    invented = await say(stack, inst, INVENTING)
    listed = await defects(stack, inst)
    assert [d.trace_id for d in listed] == [invented.trace_id, cut.trace_id]  # newest first; clean turn absent
    new, old = listed
    assert clean.trace_id not in {d.trace_id for d in listed}
    assert old.event == "chat.truncated" and list(old.kinds) == [chat_pb2.DEFECT_KIND_TRUNCATED]
    assert list(old.tools) == ["list_subordinates"]
    assert old.user_message == cut.user_message.name and old.user_text == TRUNCATING
    assert old.time == cut.user_message.create_time and old.turn_index == cut.user_message.turn_index
    assert old.name == f"{inst}/suspectedDefects/{cut.trace_id}" and old.owner == "alice"
    assert new.event == "chat.invented_result" and list(new.kinds) == [chat_pb2.DEFECT_KIND_INVENTED_RESULT]
    got = await stack.chat().GetSuspectedDefect(chat_pb2.GetSuspectedDefectRequest(name=new.name),
                                                metadata=stack.md())
    assert got == new
    # The trace id leads to the spans that carry the event.
    t = await stack.wait_trace(cut.trace_id, min_spans=3)
    assert any(e.name == "chat.truncated" for s in t.spans for e in s.events)


async def test_a_failed_turn_is_a_suspected_defect(stack: Stack):
    inst = await new_instance(stack)
    await stack.servers.pop("agent").stop(0)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().SendMessage(chat_pb2.SendMessageRequest(instance=inst, content="are you there?"),
                                       metadata=stack.md(), timeout=10)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    (d,) = await defects(stack, inst)
    assert list(d.kinds) == [chat_pb2.DEFECT_KIND_TURN_ERROR] and d.event == "chat.turn ERROR"
    assert d.user_text == "are you there?"
    # One call makes it a report on that turn: no reply was stored, so the report quotes the user message.
    fb = await stack.feedback().ReportSuspectedDefect(
        fpb.ReportSuspectedDefectRequest(suspected_defect=d.name, request_id=str(uuid.uuid4())), metadata=stack.md())
    assert fb.category == fpb.CATEGORY_BROKEN_RESPONSE and fb.author == fpb.AUTHOR_PLATFORM
    assert fb.snapshot.target_role == "ROLE_USER" and fb.snapshot.target_text == "are you there?"
    assert fb.trace_id == d.trace_id and "chat.turn ERROR" in fb.body
    # One defect, at most one report (issue 25: a new request id made a second platform report): any
    # later call, whatever its request id (a reload, another tab), answers with that report.
    again = await stack.feedback().ReportSuspectedDefect(
        fpb.ReportSuspectedDefectRequest(suspected_defect=d.name.replace(d.trace_id, d.trace_id.upper()),
                                         request_id=str(uuid.uuid4())), metadata=stack.md())
    assert again.name == fb.name
    listed = await stack.feedback().ListFeedback(fpb.ListFeedbackRequest(trace_id=d.trace_id), metadata=stack.md())
    assert [f.name for f in listed.feedback] == [fb.name]


async def test_owners_see_their_own_and_an_operator_sees_every_owners_paged(stack: Stack):
    alice, bob = await new_instance(stack, "alice"), await new_instance(stack, "bob")
    a = [await say(stack, alice, TRUNCATING, "alice") for _ in range(2)]
    b = await say(stack, bob, INVENTING, "bob")
    # Bob cannot read Alice's instance's defects; nor list every owner's without the operator scope.
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await defects(stack, alice, "bob")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await defects(stack, "instances/-", "bob", scopes=(SCOPE_CHAT,))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().GetSuspectedDefect(
            chat_pb2.GetSuspectedDefectRequest(name=f"{alice}/suspectedDefects/{a[0].trace_id}"),
            metadata=stack.md("bob", (SCOPE_CHAT,)))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    every = await defects(stack, "instances/-", "ops", scopes=(SCOPE_FEEDBACK_ADMIN,), page_size=1)
    assert [d.trace_id for d in every] == [b.trace_id, a[1].trace_id, a[0].trace_id]
    assert [d.owner for d in every] == ["bob", "alice", "alice"]
    # A page token belongs to its parent.
    first = await stack.chat().ListSuspectedDefects(
        chat_pb2.ListSuspectedDefectsRequest(parent="instances/-", page_size=1),
        metadata=stack.md("ops", (SCOPE_FEEDBACK_ADMIN,)))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().ListSuspectedDefects(
            chat_pb2.ListSuspectedDefectsRequest(parent=alice, page_token=first.next_page_token),
            metadata=stack.md("alice"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in e.value.details()


async def test_clearing_the_conversation_removes_its_suspected_defects(stack: Stack):
    inst = await new_instance(stack)
    await say(stack, inst, TRUNCATING)
    assert len(await defects(stack, inst)) == 1
    await stack.chat().ClearMessages(chat_pb2.ClearMessagesRequest(parent=inst), metadata=stack.md())
    assert await defects(stack, inst) == []
