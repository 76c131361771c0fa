"""Feedback reports over real gRPC and a real PostgreSQL, with the real chat gateway, agent and trace
collector of the `stack` fixture (tests/stack.py). CreateFeedback: the snapshot of the turn, the owner's words exactly, limits, idempotency and the agent's reports.
Tests named after field cases carry the case id.
"""
from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg
import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from agentfeedback.traces.v1 import traces_pb2
from services.common.auth import (
    ACTOR_METADATA,
    SCOPE_FEEDBACK_WRITE,
)
from services.common.errors import error_info, status_details


from tests.helpers.feedback import (
    agent_md,
    assert_clipped,
    channel_to,
    expect_error,
    flag,
    get,
    list_all,
    new_instance,
    rid,
    send,
    start_feedback,
)

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED


async def test_F04_feedback_on_the_reply_of_turn_2_of_3_snapshots_turn_2(stack):
    inst = await new_instance(stack)
    turns = [await send(stack, inst, f"question number {i}: what is {i} + {i}?") for i in range(3)]
    fb = await flag(stack, turns[1].reply.name, "the second answer is wrong", sentiment=pb.SENTIMENT_BAD)
    t2 = turns[1]
    assert fb.message == t2.reply.name
    assert fb.instance == inst
    assert fb.snapshot.source == pb.SNAPSHOT_SOURCE_CHAT_SERVICE
    assert fb.snapshot.trace_id == t2.trace_id
    assert fb.snapshot.turn_index == t2.reply.turn_index
    assert fb.snapshot.target_role == "ROLE_ASSISTANT"
    assert_clipped(fb.snapshot.target_text, fb.snapshot.target_text_clipped, t2.reply.content)
    assert fb.snapshot.target_time == t2.reply.create_time
    assert fb.snapshot.preceding_user_text == "question number 1: what is 1 + 1?"
    assert fb.author == pb.AUTHOR_USER and fb.status == pb.STATUS_OPEN
    assert [f.name for f in await list_all(stack)] == [fb.name]


async def test_F03_feedback_under_a_callers_traceparent_is_stored_readable_and_listed_once(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hello")
    caller_trace = uuid.uuid4().hex
    md = stack.md() + (("traceparent", f"00-{caller_trace}-{uuid.uuid4().hex[:16]}-01"),)
    fb = await stack.feedback().CreateFeedback(
        pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="from another service"),
                                 request_id=rid()), metadata=md)
    assert (await get(stack, fb.name)).body == "from another service"
    listed = await list_all(stack, trace_id=turn.trace_id)
    assert [f.name for f in listed] == [fb.name]
    assert fb.snapshot.trace_id == turn.trace_id
    assert await list_all(stack, trace_id=caller_trace) == []


async def test_F08_retry_with_the_same_request_id_returns_the_first_row_and_none_is_rejected(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    req = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="dup?"), request_id=rid())
    first = await stack.feedback().CreateFeedback(req, metadata=stack.md())
    again = await stack.feedback().CreateFeedback(req, metadata=stack.md())
    assert again.name == first.name and again.create_time == first.create_time
    # Ten concurrent retries of a new request: still one row.
    req2 = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="race"), request_id=rid())
    got = await asyncio.gather(*(stack.feedback().CreateFeedback(req2, metadata=stack.md()) for _ in range(10)))
    assert len({g.name for g in got}) == 1
    assert sorted(f.body for f in await list_all(stack)) == ["dup?", "race"]
    # No request id: INVALID_ARGUMENT naming the field, nothing written.
    e = await expect_error(stack.feedback().CreateFeedback(
        pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="no id")), metadata=stack.md()),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id"
    assert len(await list_all(stack)) == 2


async def test_F12_feedback_body_with_nul_is_rejected_naming_the_field_and_both_messages_survive(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hello")
    e = await expect_error(flag(stack, turn.reply.name, "ok\x00bad"), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "feedback.body"
    assert error_info(e).reason == "NUL_CHARACTER"
    assert await list_all(stack) == []
    msgs = await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst), metadata=stack.md())
    assert [m.name for m in msgs.messages] == [turn.user_message.name, turn.reply.name]


async def test_an_instance_that_contradicts_the_message_is_refused_not_replaced(stack):
    """Issue 25: CreateFeedback ignored a wrong `instance` and used the message's."""
    inst = await new_instance(stack)
    other = await new_instance(stack)
    turn = await send(stack, inst, "hello")
    wrong = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, instance=other, body="wrong"),
                                     request_id=rid())
    e = await expect_error(stack.feedback().CreateFeedback(wrong, metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "feedback.instance"
    assert await list_all(stack) == []
    same = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, instance=inst, body="right"),
                                    request_id=rid())
    assert (await stack.feedback().CreateFeedback(same, metadata=stack.md())).instance == inst


@pytest.mark.parametrize("field,value", [
    ("issue_url", "javascript:alert(1)"), ("issue_url", "https://tracker.example/" + "x" * 1_000_000),
    ("issue_url", "https://tracker.example/issues/1"), ("status", pb.STATUS_FILED), ("status", pb.STATUS_DISMISSED),
    ("status", 99)])
async def test_create_refuses_the_triage_fields_naming_them_and_writes_nothing(stack, field, value):
    """`feedback.issue_url` and `feedback.status` are set by triage (UpdateFeedback / FileFeedback, scope
    feedback:triage, audited), never by CreateFeedback: it answered OK and silently dropped them (a
    `javascript:` or 1 MB URL stored empty, a FILED report stored OPEN). Now INVALID_ARGUMENT naming the
    field and saying where it is set, the client's value never echoed, nothing written; STATUS_OPEN (what
    every new report is) is accepted."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hello")
    req = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="wrong", **{field: value}),
                                   request_id=rid())
    e = await expect_error(stack.feedback().CreateFeedback(req, metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == f"feedback.{field}"
    assert f"feedback.{field}" in e.details() and "UpdateFeedback" in e.details() and "FileFeedback" in e.details()
    assert len(e.details()) < 1024 and (not isinstance(value, str) or "tracker.example" not in e.details()
                                        and "javascript" not in e.details())
    assert await list_all(stack) == []

    req.feedback.ClearField(field)
    req.request_id = rid()
    req.feedback.status = pb.STATUS_OPEN
    fb = await stack.feedback().CreateFeedback(req, metadata=stack.md())
    assert (fb.status, fb.issue_url) == (pb.STATUS_OPEN, "")


@pytest.mark.parametrize("n,ok", [(3999, True), (4000, True), (4001, False), (100_000, False)])
async def test_F16_body_limit_in_code_points_stored_exactly_or_rejected(stack, n, ok):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hello")
    body = ("é😀ab" * (n // 4 + 1))[:n]  # multi-byte characters: 4000 code points is ~10 kB of UTF-8
    assert len(body) == n
    if ok:
        fb = await flag(stack, turn.reply.name, body)
        assert (await get(stack, fb.name)).body == body
        return
    e = await expect_error(flag(stack, turn.reply.name, body), grpc.StatusCode.INVALID_ARGUMENT)
    info = error_info(e)
    assert info.metadata["field"] == "feedback.body" and info.metadata["limit"] == "4000"
    assert "4000" in e.details()
    assert await list_all(stack) == []


async def test_S01_voice_turn_keeps_audio_key_dictation_and_exact_snapshots(stack):
    inst = await new_instance(stack)
    content = "…how many agents do you have in total? Give me their names."
    dictation = "…how many ages does Kevin total give me the next"
    audio_key = f"audio/{uuid.uuid4().hex}.webm"
    turn = await send(stack, inst, content, channel=chat_pb2.CHANNEL_VOICE, audio_key=audio_key, dictation=dictation)
    fb = await flag(stack, turn.reply.name, "it misheard me", sentiment=pb.SENTIMENT_BAD)
    fb = await get(stack, fb.name)
    assert fb.snapshot.context.audio_key == audio_key
    assert fb.snapshot.context.dictation == dictation
    assert fb.snapshot.context.channel == "CHANNEL_VOICE"
    assert fb.snapshot.preceding_user_text == content
    assert_clipped(fb.snapshot.target_text, fb.snapshot.target_text_clipped, turn.reply.content)
    assert not fb.snapshot.preceding_user_text_clipped


async def test_trace_id_target_by_the_agent_resolves_the_turn_and_emits_a_span_event_without_the_body(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "count to three")
    fb = await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(trace_id=turn.trace_id, instance=inst, body="secret owner words", author=pb.AUTHOR_AGENT,
                             category=pb.CATEGORY_BROKEN_RESPONSE), request_id=rid()), metadata=agent_md(stack))
    assert fb.trace_id == turn.trace_id and fb.author == pb.AUTHOR_AGENT
    assert fb.snapshot.target_text == turn.reply.content[:2000] and fb.snapshot.preceding_user_text == "count to three"
    await expect_error(stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(trace_id=turn.trace_id, body="no instance"), request_id=rid()), metadata=stack.md()),
        grpc.StatusCode.INVALID_ARGUMENT)
    trace = await stack.wait_trace(turn.trace_id, min_spans=4)
    deadline = time.monotonic() + 10
    while not (mine := [s for s in trace.spans if s.name == "feedback.create"]):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
        await stack.aflush_spans()
        trace = await stack.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=turn.trace_id), metadata=stack.md())
    events = [e for s in mine for e in s.events if e.name == "feedback.created"]
    assert len(events) == 1
    attrs = events[0].attributes.fields
    assert attrs["feedback.id"].string_value == fb.name.split("/")[1]
    assert attrs["feedback.category"].string_value == "CATEGORY_BROKEN_RESPONSE"
    assert "secret owner words" not in str(mine)


async def test_reused_request_id_with_a_different_request_is_rejected_and_nothing_is_written(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fbs = stack.feedback()
    r = rid()
    first = await fbs.CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=turn.reply.name, body="first body"), request_id=r), metadata=stack.md())
    retry = await fbs.CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=turn.reply.name, body="first body"), request_id=r), metadata=stack.md())
    assert retry.name == first.name
    e = await expect_error(fbs.CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=turn.reply.name, body="SECOND"), request_id=r), metadata=stack.md()),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id" and "different request" in e.details()
    assert [f.body for f in await list_all(stack)] == ["first body"]

    mask = field_mask_pb2.FieldMask(paths=["status"])
    u = rid()
    triaged = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=first.name, status=pb.STATUS_TRIAGED), update_mask=mask, request_id=u),
        metadata=stack.md())
    again = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=first.name, status=pb.STATUS_TRIAGED), update_mask=mask, request_id=u),
        metadata=stack.md())
    assert again.etag == triaged.etag
    e = await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=first.name, status=pb.STATUS_DISMISSED), update_mask=mask, request_id=u),
        metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id"
    assert (await get(stack, first.name)).status == pb.STATUS_TRIAGED


@pytest.mark.parametrize("actor", ["none", "user_token", "wrong_scope", "garbage"])
async def test_author_agent_needs_the_agents_actor_credential(stack, actor):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "count to three")
    md = {
        "none": stack.md(),
        "user_token": (*stack.md(), (ACTOR_METADATA, f"Bearer {stack.token()}")),
        "wrong_scope": agent_md(stack, actor_scopes=(SCOPE_FEEDBACK_WRITE,)),
        "garbage": (*stack.md(), (ACTOR_METADATA, "Bearer not-a-jwt")),
    }[actor]
    req = pb.CreateFeedbackRequest(feedback=pb.Feedback(trace_id=turn.trace_id, instance=inst, body="I am the agent",
                                                        author=pb.AUTHOR_AGENT), request_id=rid())
    e = await expect_error(stack.feedback().CreateFeedback(req, metadata=md), grpc.StatusCode.PERMISSION_DENIED)
    assert error_info(e).reason == "MISSING_ACTOR_CREDENTIAL" and ACTOR_METADATA in e.details()
    assert await list_all(stack) == []
    ok = await stack.feedback().CreateFeedback(req, metadata=agent_md(stack))
    assert ok.author == pb.AUTHOR_AGENT


@pytest.mark.parametrize("author", ["user", "agent"])
async def test_create_retried_after_delete_writes_nothing_and_is_not_found_naming_the_deleted_report(stack, author):
    """A late retry of a CreateFeedback whose report the owner deleted must not bring the report back
    (AIP-155: a retry returns the first result, never a second row; the first result is gone):
    NOT_FOUND naming `feedback/{id}` with reason FEEDBACK_DELETED, nothing written. The same request_id
    with a different request is still INVALID_ARGUMENT naming `request_id`. The AGENT path
    (`record_feedback`: trace id target, actor credential) goes through the same RPC and behaves alike."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    if author == "user":
        md, target = stack.md(), pb.Feedback(message=turn.reply.name)
    else:
        md, target = agent_md(stack), pb.Feedback(trace_id=turn.trace_id, instance=inst, author=pb.AUTHOR_AGENT)
    target.body, target.sentiment = "forget I said this", pb.SENTIMENT_BAD
    req = pb.CreateFeedbackRequest(feedback=target, request_id=rid())
    fbs = stack.feedback()
    first = await fbs.CreateFeedback(req, metadata=md)
    assert (await fbs.CreateFeedback(req, metadata=md)).name == first.name  # before the delete: the first row
    await fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=first.name), metadata=stack.md())

    e = await expect_error(fbs.CreateFeedback(req, metadata=md), grpc.StatusCode.NOT_FOUND)
    info = error_info(e)
    assert info.reason == "FEEDBACK_DELETED" and info.metadata["resource"] == first.name
    assert first.name in e.details() and "deleted" in e.details()
    resources = []
    for d in status_details(e):
        if d.Is(error_details_pb2.ResourceInfo.DESCRIPTOR):
            resources.append(error_details_pb2.ResourceInfo())
            d.Unpack(resources[-1])
    assert [r.resource_name for r in resources] == [first.name]
    assert await list_all(stack) == []

    other = pb.CreateFeedbackRequest()
    other.CopyFrom(req)
    other.feedback.body = "a different report"
    e = await expect_error(fbs.CreateFeedback(other, metadata=md), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id" and error_info(e).reason == "REQUEST_ID_REUSED"
    await expect_error(fbs.CreateFeedback(req, metadata=md), grpc.StatusCode.NOT_FOUND)  # still, on a 2nd retry
    assert await list_all(stack) == []
    # The owner can report again, with a new request id.
    again = pb.CreateFeedbackRequest()
    again.CopyFrom(req)
    again.request_id = rid()
    assert (await fbs.CreateFeedback(again, metadata=md)).name != first.name
    assert [f.body for f in await list_all(stack)] == ["forget I said this"]


async def test_deleted_reports_request_id_is_remembered_24_hours_like_delete_records(stack, tmp_path):
    """Retention of the deleted report's create request id: 24 h, the same as DeleteFeedback's own
    records (documented on the RPC). Aged past it in the database, a retry creates a new row. Within
    it the answer does not depend on the chat service: a replica that cannot reach it still says
    FEEDBACK_DELETED (not UNAVAILABLE) and writes nothing."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    req = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="old words"), request_id=rid())
    fbs = stack.feedback()
    first = await fbs.CreateFeedback(req, metadata=stack.md())
    await fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=first.name), metadata=stack.md())
    down = await start_feedback(stack, tmp_path, chat_target="127.0.0.1:1", chat_timeout_s=0.5)
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, down.port))
        e = await expect_error(stub.CreateFeedback(req, metadata=stack.md()), grpc.StatusCode.NOT_FOUND)
        assert error_info(e).reason == "FEEDBACK_DELETED"
    finally:
        await down.stop(0.5)
    assert await list_all(stack) == []
    conn = await asyncpg.connect(stack.database_url)
    try:
        await conn.execute("UPDATE feedback.feedback_create_requests SET delete_time = now() - interval '23 hours' "
                           "WHERE delete_time IS NOT NULL")
        await expect_error(fbs.CreateFeedback(req, metadata=stack.md()), grpc.StatusCode.NOT_FOUND)
        await conn.execute("UPDATE feedback.feedback_create_requests SET delete_time = now() - interval '25 hours' "
                           "WHERE delete_time IS NOT NULL")
    finally:
        await conn.close()
    late = await fbs.CreateFeedback(req, metadata=stack.md())
    assert late.name != first.name and [f.name for f in await list_all(stack)] == [late.name]
