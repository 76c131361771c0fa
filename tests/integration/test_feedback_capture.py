"""Feedback reports over real gRPC and a real PostgreSQL, with the real chat gateway, agent and trace
collector of the `stack` fixture (tests/stack.py), the collector on each span store (PostgreSQL, and
ClickHouse through chdb, the in-process engine standing in for a server). Evidence: the capture worker freezing a turn's spans (PENDING → CAPTURED / EXPIRED), client snapshots verified later, once-only events.
Tests named after field cases carry the case id.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid

import grpc
import pytest

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from agentfeedback.traces.v1 import traces_pb2
from services.common.auth import (
    SCOPE_FEEDBACK_READ,
    SCOPE_FEEDBACK_WRITE,
)
from services.common.errors import error_info
from services.feedback.codec import report_from_pb
from services.feedback.ticket import TicketFields, render_ticket
from tests.conftest import SPAN_STORES
from tests.stack import start_stack


from tests.helpers.feedback import (
    assert_clipped,
    channel_to,
    created_events,
    expect_error,
    flag,
    get,
    get_as,
    list_all,
    new_instance,
    rid,
    send,
    start_feedback,
    wait_state,
    wait_until,
)

pytestmark = pytest.mark.parametrize("span_store", SPAN_STORES, indirect=True)
PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED

# The SDK's batch delay for the stacks whose spans must stay in the exporters until a test flushes them
# (`Stack.flush_spans`, which `wait_trace` calls): an hour, never reached by a test. With the default
# (5 s) such a test depended on its first steps taking less than the delay.
HOLD_SPANS_MS = "3600000"


@pytest.fixture
async def held_stack(database_url, tmp_path, collector_store, monkeypatch):
    """The stack (on this test's span store) whose services export their spans only when the test
    flushes them."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", HOLD_SPANS_MS)
    settings, kw = collector_store
    s = await start_stack(database_url, tmp_path, collector_kw=kw, collector=settings)
    try:
        yield s
    finally:
        await s.stop()


async def test_F05_pending_until_spans_land_then_captured_and_random_message_is_not_found(held_stack):
    stack = held_stack
    inst = await new_instance(stack)
    turn = await send(stack, inst, "list your tools please")
    # The exporters hold the spans until flushed: the collector has nothing of the turn.
    await expect_error(stack.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=turn.trace_id), metadata=stack.md()),
                       grpc.StatusCode.NOT_FOUND)
    fb = await flag(stack, turn.reply.name, "tool output looks off")
    second = await flag(stack, turn.user_message.name, "and my question was misread")
    assert fb.trace_snapshot.state == PENDING and second.trace_snapshot.state == PENDING
    listed = await list_all(stack)
    assert [f.name for f in listed] == [second.name, fb.name]
    assert {f.trace_snapshot.state for f in listed} == {PENDING}

    trace = await stack.wait_trace(turn.trace_id, min_spans=3)
    captured = await wait_state(stack, fb.name, CAPTURED)
    tool_spans = [s for s in trace.spans if s.name == "tool.call"]
    assert tool_spans, "the agent makes at least one tool call per turn"
    names = {s.attributes.fields["gen_ai.tool.name"].string_value for s in tool_spans}
    assert {c.name for c in captured.trace_snapshot.tool_calls} == names
    assert {c.span_id for c in captured.trace_snapshot.tool_calls} == {s.span_id for s in tool_spans}
    assert all(c.duration_ms >= 0 for c in captured.trace_snapshot.tool_calls)
    assert captured.trace_snapshot.capture_time.seconds > 0
    assert {s.span_id for s in captured.trace_snapshot.spans} >= {s.span_id for s in trace.spans
                                                                   if s.name != "feedback.create"}
    # Both reports of the turn carry the same frozen copy.
    other = await wait_state(stack, second.name, CAPTURED)
    assert other.trace_snapshot.tool_calls == captured.trace_snapshot.tool_calls
    # A third report after the capture is born CAPTURED with that copy (no new look at the collector).
    third = await flag(stack, turn.reply.name, "still wrong")
    assert third.trace_snapshot.state == CAPTURED
    assert third.trace_snapshot.tool_calls == captured.trace_snapshot.tool_calls

    random_message = f"{inst}/messages/{uuid.uuid4().hex}"
    await expect_error(flag(stack, random_message, "nope"), grpc.StatusCode.NOT_FOUND)
    assert [f.name for f in await list_all(stack)] == [third.name, second.name, fb.name]


async def test_F18_spans_expired_feedback_keeps_words_snapshots_voice_and_frozen_tool_calls(held_stack, tmp_path):
    stack = held_stack
    inst = await new_instance(stack)
    turn = await send(stack, inst, "how many agents?", channel=chat_pb2.CHANNEL_VOICE, audio_key="audio/k1",
                      dictation="how many ages")
    fb = await flag(stack, turn.reply.name, "wrong count")
    await stack.wait_trace(turn.trace_id, min_spans=3)
    captured = await wait_state(stack, fb.name, CAPTURED)
    assert captured.trace_snapshot.tool_calls and not captured.trace_snapshot.spans_expired
    # A second turn whose spans never reach the collector before they age out.
    late = await send(stack, inst, "and now?")
    late_fb = await flag(stack, late.reply.name, "never captured")

    # 15 days pass: the collector's retention drops the day's partition...
    fifteen_days = dt.timedelta(days=15)
    await stack.servers["collector"].retention.run_once(now_ns=time.time_ns() + int(fifteen_days.total_seconds() * 1e9))
    await expect_error(stack.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=turn.trace_id), metadata=stack.md()),
                       grpc.StatusCode.NOT_FOUND)
    # ...and a feedback replica whose clock is 15 days ahead reads the same database.
    aged = await start_feedback(stack, tmp_path, clock=lambda: dt.datetime.now(dt.UTC) + fifteen_days)
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, aged.port))
        old = await stub.GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
        assert old.body == "wrong count"
        assert old.snapshot == captured.snapshot and old.snapshot.preceding_user_text == "how many agents?"
        assert_clipped(old.snapshot.target_text, old.snapshot.target_text_clipped, turn.reply.content)
        assert old.snapshot.context.audio_key == "audio/k1" and old.snapshot.context.dictation == "how many ages"
        assert old.trace_snapshot.tool_calls == captured.trace_snapshot.tool_calls
        assert old.trace_snapshot.state == CAPTURED and old.trace_snapshot.spans_expired
        # Never captured: the frozen copy is empty, but the row says the spans are gone and keeps the words.
        g = await stub.GetFeedback(pb.GetFeedbackRequest(name=late_fb.name), metadata=stack.md())
        assert g.trace_snapshot.spans_expired
        assert g.body == "never captured" and g.snapshot.target_text == late.reply.content[:2000]
    finally:
        await aged.stop(0.5)


async def test_F18_a_turn_never_captured_within_retention_is_marked_expired_by_the_worker(
        database_url, tmp_path, collector_store, monkeypatch):
    # The stack's own replica never looks at its queue here; only the aged replica's worker does.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", HOLD_SPANS_MS)
    store_settings, store_kw = collector_store
    stack = await start_stack(database_url, tmp_path, feedback={"capture_poll_s": 3600.0}, collector=store_settings,
                              collector_kw=store_kw)
    try:
        inst = await new_instance(stack)
        turn = await send(stack, inst, "and now?")  # its spans are still in the exporters' buffers
        aged = await start_feedback(stack, tmp_path, clock=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(days=15))
        try:
            stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, aged.port))
            fb = await stub.CreateFeedback(pb.CreateFeedbackRequest(
                feedback=pb.Feedback(message=turn.reply.name, body="too late"), request_id=rid()), metadata=stack.md())
            deadline = time.monotonic() + 20
            while (g := await stub.GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
                   ).trace_snapshot.state == PENDING:
                assert time.monotonic() < deadline, "the worker never marked the uncaptured turn EXPIRED"
                await asyncio.sleep(0.05)
        finally:
            await aged.stop(0.5)
        assert g.trace_snapshot.state == EXPIRED and g.trace_snapshot.spans_expired and g.trace_snapshot.attempts == 1
        assert g.body == "too late" and g.snapshot.target_text == turn.reply.content[:2000]
    finally:
        await stack.stop()


async def test_capture_work_lives_in_the_database_and_survives_the_replica_that_took_the_report(held_stack, tmp_path):
    stack = held_stack
    inst = await new_instance(stack)
    turn = await send(stack, inst, "which tools did you use?")
    # A replica without a worker takes the report and is gone before the spans land.
    gone = await start_feedback(stack, tmp_path, run_worker=False)
    stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, gone.port))
    fb = await stub.CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=turn.reply.name, body="left behind"), request_id=rid()), metadata=stack.md())
    await gone.stop(0.5)
    assert fb.trace_snapshot.state == PENDING
    await stack.wait_trace(turn.trace_id, min_spans=3)
    captured = await wait_state(stack, fb.name, CAPTURED)  # the stack's replica found it in the queue
    assert captured.trace_snapshot.tool_calls and captured.body == "left behind"


async def test_a_replica_that_cannot_reach_chat_hands_client_snapshots_to_one_that_can(stack, tmp_path):
    """Two replicas: one whose route to the chat service is broken (it keeps running, its worker keeps
    polling), and the stack's own. The broken one takes the reports (chat down → client snapshots)
    and its worker claims them first; it must hand them back at once instead of parking them for its
    own retry delay (here 4 × 30 s), so the healthy replica verifies every one within seconds."""
    inst = await new_instance(stack)
    turns = [await send(stack, inst, f"question {i}") for i in range(5)]
    down = await start_feedback(stack, tmp_path, chat_target="127.0.0.1:1", chat_timeout_s=0.5,
                                capture_backoff_s=30.0)
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, down.port))
        made = [await stub.CreateFeedback(pb.CreateFeedbackRequest(
            feedback=pb.Feedback(message=t.reply.name, body=f"report {i}"), request_id=rid(),
            client_snapshot=pb.Snapshot(target_text="as the client saw it", trace_id=t.trace_id)),
            metadata=stack.md()) for i, t in enumerate(turns)]
        assert {f.snapshot.source for f in made} == {pb.SNAPSHOT_SOURCE_CLIENT}
        deadline = time.monotonic() + 10
        for f in made:
            while (g := await get(stack, f.name)).snapshot.source != pb.SNAPSHOT_SOURCE_CHAT_SERVICE:
                assert time.monotonic() < deadline, f"{f.name} still waits for the replica that cannot reach chat"
                await asyncio.sleep(0.1)
            assert g.snapshot.target_text == next(t.reply.content for t in turns if t.reply.name == f.message)[:2000]
    finally:
        await down.stop(0.5)


async def test_chat_unreachable_accepts_client_snapshot_then_the_worker_fills_the_authoritative_one(stack, tmp_path):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "what is the weather?")
    dead_port = 1  # nothing listens on port 1 of loopback: connection refused at once
    down = await start_feedback(stack, tmp_path, chat_target=f"127.0.0.1:{dead_port}", chat_timeout_s=0.5)
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, down.port))
        req = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="chat was down"),
                                       request_id=rid())
        e = await expect_error(stub.CreateFeedback(req, metadata=stack.md()), grpc.StatusCode.UNAVAILABLE)
        assert error_info(e).reason == "CHAT_UNAVAILABLE"
        req.client_snapshot.CopyFrom(pb.Snapshot(target_role="ROLE_ASSISTANT", target_text="as the client saw it",
                                                 preceding_user_text="what is the weather?", trace_id=turn.trace_id))
        fb = await stub.CreateFeedback(req, metadata=stack.md())
        assert fb.snapshot.source == pb.SNAPSHOT_SOURCE_CLIENT and fb.snapshot.target_text == "as the client saw it"
    finally:
        await down.stop(0.5)
    # The stack's own replica (chat reachable) replaces it from the database queue.
    deadline = time.monotonic() + 20
    while (g := await get(stack, fb.name)).snapshot.source != pb.SNAPSHOT_SOURCE_CHAT_SERVICE:
        assert time.monotonic() < deadline, "client snapshot never replaced"
        await asyncio.sleep(0.1)
    assert g.snapshot.target_text == turn.reply.content[:2000] and g.body == "chat was down"


@pytest.mark.parametrize("anchor", ["message", "trace_id"])
async def test_client_snapshot_naming_another_owners_turn_never_receives_their_tool_calls(stack, tmp_path, anchor):
    """Chat service unreachable at create time: mallory (feedback:write+read only) names alice's reply
    (or alice's trace id + instance) with a forged client snapshot. The row is accepted (source CLIENT)
    but the worker never freezes alice's spans into it: once the chat service is back it answers
    NOT_FOUND for mallory, and the row keeps mallory's words with an UNAVAILABLE, unverified snapshot.
    Alice's own CLIENT report of the same turn, verified the same way, is captured (the worker works)."""
    inst = await new_instance(stack, "alice")
    turn = await send(stack, inst, "which tools did you use?")
    await stack.wait_trace(turn.trace_id, min_spans=3)
    mallory = stack.md("mallory", (SCOPE_FEEDBACK_WRITE, SCOPE_FEEDBACK_READ))
    # A replica whose chat service is unreachable (nothing listens on port 1), with its own worker.
    down = await start_feedback(stack, tmp_path, chat_target="127.0.0.1:1", chat_timeout_s=0.5)
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, down.port))
        target = (pb.Feedback(message=turn.reply.name) if anchor == "message"
                  else pb.Feedback(trace_id=turn.trace_id, instance=inst))
        forged = pb.CreateFeedbackRequest(feedback=target, request_id=rid(), client_snapshot=pb.Snapshot(
            trace_id=turn.trace_id, target_text="FORGED"))
        forged.feedback.body = "mallory's words"
        fb = await stub.CreateFeedback(forged, metadata=mallory)
        assert fb.snapshot.source == pb.SNAPSHOT_SOURCE_CLIENT and fb.trace_snapshot.state == PENDING
        own = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="alice's words"),
                                       request_id=rid(), client_snapshot=pb.Snapshot(trace_id=turn.trace_id,
                                                                                     target_text="as alice saw it"))
        mine = await stub.CreateFeedback(own, metadata=stack.md("alice"))
        # The spans are in the collector and this replica's worker polls every 0.2 s: an unverified
        # anchor must not be captured while the chat service cannot vouch for it. (The stack's replica,
        # which reaches the chat service, may already have refused it: PENDING or UNAVAILABLE.)
        await asyncio.sleep(2.0)
        g = await get_as(stack, fb.name, "mallory")
        assert g.trace_snapshot.state in (PENDING, pb.TRACE_SNAPSHOT_STATE_UNAVAILABLE)
        assert not g.trace_snapshot.tool_calls and not g.trace_snapshot.spans
    finally:
        await down.stop(0.5)
    # The chat service is reachable from the stack's replica: it verifies the anchors as their owners.
    g = await wait_until(lambda: get_as(stack, fb.name, "mallory"),
                         lambda f: f.trace_snapshot.state != PENDING)
    assert g.trace_snapshot.state == pb.TRACE_SNAPSHOT_STATE_UNAVAILABLE
    assert not g.trace_snapshot.tool_calls and not g.trace_snapshot.spans and not g.trace_snapshot.events
    assert g.snapshot.source == pb.SNAPSHOT_SOURCE_CLIENT and g.snapshot.unverified
    assert g.body == "mallory's words" and g.snapshot.target_text == "FORGED"
    assert turn.reply.content[:40] not in str(g)
    ok = await wait_state(stack, mine.name, CAPTURED)
    assert ok.trace_snapshot.tool_calls and ok.snapshot.source == pb.SNAPSHOT_SOURCE_CHAT_SERVICE
    assert not ok.snapshot.unverified
    # Nothing later turns mallory's row into a capture (the worker keeps running).
    await asyncio.sleep(0.5)
    assert not (await get_as(stack, fb.name, "mallory")).trace_snapshot.tool_calls
    # And the unverified claim wrote nothing into alice's trace (no `feedback.created` for mallory's row).
    await stack.aflush_spans()
    trace = await stack.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=turn.trace_id), metadata=stack.md())
    ids = {e.attributes.fields["feedback.id"].string_value for sp in trace.spans for e in sp.events
           if e.name == "feedback.created"}
    assert fb.name.split("/")[1] not in ids
    # An unverified claim is never presented as evidence: its ticket draft says so, and it is not filed.
    title, body = render_ticket(report_from_pb(g), TicketFields(body=True, message_text=True))
    assert title.startswith("[unverified]") and "**Unverified:**" in body
    e = await expect_error(stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md("mallory")),
                           grpc.StatusCode.FAILED_PRECONDITION)
    assert error_info(e).reason == "ANCHOR_UNVERIFIED"
    assert not (await get_as(stack, fb.name, "mallory")).issue_url


async def test_client_snapshot_report_gets_exactly_one_created_event_on_its_turn_once_verified(stack, tmp_path):
    """Chat service unreachable at create time: the report is stored with a CLIENT snapshot (no event:
    its trace id is only the client's claim). Once the stack's worker has verified it with the chat
    service, the turn's trace carries exactly one `feedback.created` event for it — ids, sentiment,
    category, never the body — and it stays one while the workers keep running."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "what is the weather?")
    await stack.wait_trace(turn.trace_id, min_spans=3)
    body = "the words only the owner may read 7f3a"
    down = await start_feedback(stack, tmp_path, chat_target="127.0.0.1:1", chat_timeout_s=0.5)
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, down.port))
        fb = await stub.CreateFeedback(pb.CreateFeedbackRequest(
            feedback=pb.Feedback(message=turn.reply.name, body=body, sentiment=pb.SENTIMENT_BAD,
                                 category=pb.CATEGORY_TOOL_FAILURE),
            request_id=rid(), client_snapshot=pb.Snapshot(trace_id=turn.trace_id, target_text="as the client saw it")),
            metadata=stack.md())
        assert fb.snapshot.source == pb.SNAPSHOT_SOURCE_CLIENT
    finally:
        await down.stop(0.5)
    fid = fb.name.split("/")[1]
    verified = await wait_state(stack, fb.name, CAPTURED)  # verified by the stack's replica, then captured
    assert verified.snapshot.source == pb.SNAPSHOT_SOURCE_CHAT_SERVICE
    mine = await wait_until(lambda: created_events(stack, turn.trace_id),
                            lambda evs: any(e.attributes.fields["feedback.id"].string_value == fid for _, e in evs))
    # More worker passes (poll 0.2 s) and a second worker on the same database add nothing.
    other = await start_feedback(stack, tmp_path)
    await asyncio.sleep(1.0)
    await other.stop(0.5)
    mine = [(sp, e) for sp, e in await created_events(stack, turn.trace_id)
            if e.attributes.fields["feedback.id"].string_value == fid]
    assert len(mine) == 1
    span, event = mine[0]
    attrs = event.attributes.fields
    assert span.name == "feedback.create" and span.trace_id == turn.trace_id
    assert attrs["feedback.sentiment"].string_value == "SENTIMENT_BAD"
    assert attrs["feedback.category"].string_value == "CATEGORY_TOOL_FAILURE"
    assert attrs["feedback.target.message"].string_value == turn.reply.name
    assert attrs["feedback.instance"].string_value == inst
    assert body not in str(span) and "as the client saw it" not in str(span)
