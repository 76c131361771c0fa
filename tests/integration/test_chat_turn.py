"""The turn, end to end through real servers: chat gateway → reference agent → collector (+ feedback).

Spans are checked as the collector stored them (`Stack.wait_trace`), not in memory.
"""

from __future__ import annotations

import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.traces.v1 import traces_pb2

from tests.stack import Stack
from tests.helpers.chat import by_name, events, new_instance

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_PARENT}-01"


def check_turn_trace(t: traces_pb2.Trace, trace_id: str) -> None:
    """F01: every span shares the minted id; tool span ⊂ agent span ⊂ turn; caller only a link."""
    assert trace_id != CALLER_TRACE
    assert {s.trace_id for s in t.spans} == {trace_id}
    (turn,) = by_name(t, "chat.turn")
    (think,) = by_name(t, "agent.think")
    tools = by_name(t, "tool.call")
    assert tools, "the agent made no tool call"
    assert turn.parent_span_id == ""
    assert [(link.trace_id, link.span_id) for link in turn.links] == [(CALLER_TRACE, CALLER_PARENT)]
    assert think.parent_span_id == turn.span_id
    assert all(s.parent_span_id == think.span_id for s in tools)
    assert tools[0].attributes["gen_ai.tool.name"] and tools[0].attributes["gen_ai.tool.call.id"]
    assert [e.name for e in turn.events][:1] == ["chat.in"] and turn.events[-1].name == "chat.out"


async def test_F01_turn_spans_share_minted_trace_id_caller_only_linked(stack: Stack):
    parent = await new_instance(stack)
    md = (*stack.md(), ("traceparent", TRACEPARENT))
    r = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="hello there"), metadata=md
    )
    assert r.trace_id == r.user_message.trace_id == r.reply.trace_id
    assert r.user_message.turn_index == r.reply.turn_index == 0
    assert r.reply.content and r.reply.role == chat_pb2.ROLE_ASSISTANT
    t = await stack.wait_trace(r.trace_id, min_spans=3)
    check_turn_trace(t, r.trace_id)
    # Both stored messages carry the id too.
    listed = await stack.chat().ListMessages(
        chat_pb2.ListMessagesRequest(parent=parent, trace_id=r.trace_id), metadata=stack.md()
    )
    assert [(m.role, m.trace_id) for m in listed.messages] == [
        (chat_pb2.ROLE_USER, r.trace_id),
        (chat_pb2.ROLE_ASSISTANT, r.trace_id),
    ]


async def test_F01_streaming_turn_same_rules(stack: Stack):
    parent = await new_instance(stack)
    md = (*stack.md(), ("traceparent", TRACEPARENT))
    items = [
        x
        async for x in stack.chat().StreamMessage(
            chat_pb2.SendMessageRequest(instance=parent, content="tell me a story"), metadata=md
        )
    ]
    first, *deltas, last = items
    assert first.WhichOneof("event") == "user_message" and last.WhichOneof("event") == "reply"
    trace_id = first.trace_id
    assert first.user_message.trace_id == last.reply.trace_id == last.trace_id == trace_id
    assert deltas and "".join(d.reply_delta for d in deltas) == last.reply.content
    t = await stack.wait_trace(trace_id, min_spans=3)
    check_turn_trace(t, trace_id)
    listed = await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md())
    assert [m.trace_id for m in listed.messages] == [trace_id, trace_id]
    assert listed.messages[1].content == last.reply.content


async def test_chat_truncated_carries_turn_trace_id(stack: Stack):
    """list_subordinates returns more than tool_result_max_bytes: the tool layer cuts it and says so."""
    parent = await new_instance(stack)
    r = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(
            instance=parent, content="…how many agents do you have in total? Give me their names."
        ),
        metadata=stack.md(),
    )
    t = await stack.wait_trace(r.trace_id, min_spans=3)
    (tool,) = by_name(t, "tool.call")
    assert tool.attributes["gen_ai.tool.name"] == "list_subordinates"
    ((span, ev),) = events(t, "chat.truncated")
    assert span.trace_id == r.trace_id == r.reply.trace_id
    original, kept = ev.attributes["tool.result.original_bytes"], ev.attributes["tool.result.kept_bytes"]
    assert kept <= 4096 < original  # AgentSettings.tool_result_max_bytes default
    assert tool.attributes["tool.result.size_bytes"] == original
    assert "120 agents in total" in r.reply.content and "cut at" in r.reply.content


async def test_chat_invented_result_carries_turn_trace_id(stack: Stack):
    parent = await new_instance(stack)
    r = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="Please send the weekly report to my team."),
        metadata=stack.md(),
    )
    assert "send_report returned" in r.reply.content  # the scripted claim
    t = await stack.wait_trace(r.trace_id, min_spans=3)
    ((span, ev),) = events(t, "chat.invented_result")
    assert span.name == "agent.think" and span.trace_id == r.trace_id
    assert ev.attributes["gen_ai.tool.name"] == "send_report"
    assert "send_report" not in {s.attributes["gen_ai.tool.name"] for s in by_name(t, "tool.call")}


async def test_remember_that_you_got_that_wrong_records_feedback_not_memory(stack: Stack):
    from agentfeedback.feedback.v1 import feedback_pb2 as fpb

    parent = await new_instance(stack)
    first = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="What is 2+2?"), metadata=stack.md()
    )
    r = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="Remember that you got that wrong."),
        metadata=stack.md(),
    )
    t = await stack.wait_trace(r.trace_id, min_spans=3)
    names = [s.attributes["gen_ai.tool.name"] for s in by_name(t, "tool.call")]
    assert names == ["record_feedback"]
    assert "filed that as feedback" in r.reply.content and "carry on" in r.reply.content
    assert "remember" not in r.reply.content.lower() and "next time" not in r.reply.content.lower()
    # The row (issue 13): author AGENT, about the reply complained about (the previous assistant
    # message: its snapshot and frozen evidence are that turn's), the owner's words paraphrased.
    listed = await stack.feedback().ListFeedback(
        fpb.ListFeedbackRequest(trace_id=first.trace_id), metadata=stack.md()
    )
    (row,) = listed.feedback
    assert row.author == fpb.AUTHOR_AGENT and row.message == first.reply.name and row.owner == "alice"
    assert row.snapshot.trace_id == first.trace_id and row.snapshot.target_text == first.reply.content[:2000]
    assert "Remember that you got that wrong." in row.body
    assert first.trace_id != r.trace_id
    # The other phrasing routes the same way.
    plain = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="that's wrong, write that down"),
        metadata=stack.md(),
    )
    t2 = await stack.wait_trace(plain.trace_id, min_spans=3)
    assert [s.attributes["gen_ai.tool.name"] for s in by_name(t2, "tool.call")] == ["record_feedback"]


async def test_clear_messages_leaves_feedback_intact(stack: Stack):
    from agentfeedback.feedback.v1 import feedback_pb2 as fpb

    parent = await new_instance(stack)
    r = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="hello there"), metadata=stack.md()
    )
    fb = await stack.feedback().CreateFeedback(
        fpb.CreateFeedbackRequest(
            feedback=fpb.Feedback(message=r.reply.name, body="the greeting was off"),
            request_id=str(uuid.uuid4()),
        ),
        metadata=stack.md(),
    )
    cleared = await stack.chat().ClearMessages(
        chat_pb2.ClearMessagesRequest(parent=parent), metadata=stack.md()
    )
    assert cleared.deleted_count == 2
    left = await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md())
    assert list(left.messages) == []
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().GetMessage(chat_pb2.GetMessageRequest(name=r.reply.name), metadata=stack.md())
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    got = await stack.feedback().GetFeedback(fpb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert got.body == "the greeting was off"
    assert got.snapshot.target_text == r.reply.content[:2000]
    assert got.snapshot.trace_id == r.trace_id


async def test_remember_a_fact_goes_to_write_memory(stack: Stack):
    parent = await new_instance(stack)
    r = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="Remember that my sister is called Ana."),
        metadata=stack.md(),
    )
    t = await stack.wait_trace(r.trace_id, min_spans=3)
    assert [s.attributes["gen_ai.tool.name"] for s in by_name(t, "tool.call")] == ["write_memory"]
    assert r.reply.content == "Noted. I will remember: my sister is called Ana"


async def test_an_agent_recorded_report_freezes_the_evidence_of_the_reply_complained_about(stack: Stack):
    import asyncio  # noqa: PLC0415

    from agentfeedback.feedback.v1 import feedback_pb2 as fpb  # noqa: PLC0415

    parent = await new_instance(stack)
    first = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="how many agents do you have in total?"),
        metadata=stack.md(),
    )
    complaint = await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="that's wrong, write that down"), metadata=stack.md()
    )
    await stack.wait_trace(first.trace_id, min_spans=3)
    await stack.wait_trace(complaint.trace_id, min_spans=3)
    (row,) = (await stack.feedback().ListFeedback(fpb.ListFeedbackRequest(author=fpb.AUTHOR_AGENT),
                                                  metadata=stack.md())).feedback
    assert row.message == first.reply.name and row.context_trace_id == complaint.trace_id
    for _ in range(100):
        row = await stack.feedback().GetFeedback(fpb.GetFeedbackRequest(name=row.name), metadata=stack.md())
        if row.trace_snapshot.state == fpb.TRACE_SNAPSHOT_STATE_CAPTURED:
            break
        await asyncio.sleep(0.2)
    # The frozen tool calls are the complained-about turn's (list_subordinates), not the record_feedback call.
    assert [c.name for c in row.trace_snapshot.tool_calls] == ["list_subordinates"]
