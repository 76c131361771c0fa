"""Feedback reports over real gRPC and a real PostgreSQL, with the real chat gateway, agent and trace
collector of the `stack` fixture (tests/stack.py). Tests named after field cases carry the case id.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from pathlib import Path

import asyncpg
import grpc
import pytest
from aiohttp import web
from google.protobuf import field_mask_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from agentfeedback.traces.v1 import traces_pb2
from services.common.auth import (
    ACTOR_METADATA,
    SCOPE_FEEDBACK_AGENT,
    SCOPE_FEEDBACK_READ,
    SCOPE_FEEDBACK_WRITE,
    mint_token,
)
from services.common.errors import error_info, status_details
from services.feedback.codec import report_from_pb
from services.feedback.ticket import TicketFields, render_ticket
from services.feedback.server import create_server
from services.feedback.settings import FeedbackSettings
from tests.stack import TEST_JWT_SECRET, Stack, start_stack

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED


def rid() -> str:
    return str(uuid.uuid4())


async def new_instance(stack: Stack, sub: str = "alice") -> str:
    inst = await stack.chat().CreateInstance(
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name=f"{sub}'s agent", agent="reference")),
        metadata=stack.md(sub))
    return inst.name


async def send(stack: Stack, instance: str, content: str, sub: str = "alice", **kw) -> chat_pb2.SendMessageResponse:
    return await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=instance, content=content, request_id=rid(), **kw), metadata=stack.md(sub))


async def flag(stack: Stack, message: str, body: str = "that's wrong", sub: str = "alice", **kw) -> pb.Feedback:
    return await stack.feedback().CreateFeedback(
        pb.CreateFeedbackRequest(feedback=pb.Feedback(message=message, body=body, **kw), request_id=rid()),
        metadata=stack.md(sub))


async def get(stack: Stack, name: str, sub: str = "alice") -> pb.Feedback:
    return await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=name), metadata=stack.md(sub))


async def wait_state(stack: Stack, name: str, state: int, timeout_s: float = 20.0) -> pb.Feedback:
    deadline = time.monotonic() + timeout_s
    while True:
        fb = await get(stack, name)
        if fb.trace_snapshot.state == state:
            return fb
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} stayed {pb.TraceSnapshotState.Name(fb.trace_snapshot.state)}")
        await asyncio.sleep(0.1)


async def list_all(stack: Stack, sub: str = "alice", **filters) -> list[pb.Feedback]:
    out, token = [], ""
    while True:
        resp = await stack.feedback().ListFeedback(pb.ListFeedbackRequest(page_token=token, **filters),
                                                   metadata=stack.md(sub))
        out += resp.feedback
        token = resp.next_page_token
        if not token:
            return out


def assert_clipped(snapshot_text: str, clipped: bool, original: str, limit: int = 2000) -> None:
    """A snapshot text is the original, or its first `limit` code points flagged as clipped."""
    assert snapshot_text == original[:limit]
    assert clipped == (len(original) > limit)


def agent_md(stack: Stack, sub: str = "alice", actor_scopes: tuple[str, ...] = (SCOPE_FEEDBACK_AGENT,)):
    """The user's metadata plus the agent's own credential (`x-agentfeedback-actor`), as the reference
    agent sends it."""
    actor = mint_token(TEST_JWT_SECRET, "svc:agent", actor_scopes, 600)
    return (*stack.md(sub), (ACTOR_METADATA, f"Bearer {actor}"))


async def expect_error(awaitable, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await awaitable
    assert e.value.code() == code, e.value.details()
    return e.value


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


async def test_F05_pending_until_spans_land_then_captured_and_random_message_is_not_found(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "list your tools please")
    # The exporters have not flushed yet (batch delay 5 s): the collector has nothing of the turn.
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


async def test_F18_spans_expired_feedback_keeps_words_snapshots_voice_and_frozen_tool_calls(stack, tmp_path):
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


async def test_F18_a_turn_never_captured_within_retention_is_marked_expired_by_the_worker(database_url, tmp_path):
    # The stack's own replica never looks at its queue here; only the aged replica's worker does.
    stack = await start_stack(database_url, tmp_path, feedback={"capture_poll_s": 3600.0})
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


async def test_capture_work_lives_in_the_database_and_survives_the_replica_that_took_the_report(stack, tmp_path):
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


async def start_feedback(stack: Stack, data_dir: Path, clock=None, run_worker: bool = True, **overrides):
    """Another feedback server process-equivalent on the stack's database (its own pool and worker)."""
    values = dict(
        listen="127.0.0.1:0", chat_target=f"127.0.0.1:{stack.ports['chat']}",
        traces_target=f"127.0.0.1:{stack.ports['query']}", capture_poll_s=0.2, capture_backoff_s=0.2,
        database_url=stack.database_url, data_dir=data_dir, jwt_secret=TEST_JWT_SECRET, shutdown_grace_s=0.5, shutdown_drain_s=0,
        tracker_markdown_dir=str(data_dir / "tickets"))
    settings = FeedbackSettings(**{**values, **overrides})
    return await create_server(settings, database_url=stack.database_url, clock=clock, run_worker=run_worker,
                               tracer_provider=stack.providers["feedback"])


def channel_to(stack: Stack, port: int) -> grpc.aio.Channel:
    """A loopback channel to `port`, closed with the stack."""
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stack.channels.append(ch)
    return ch


async def test_F22_another_user_cannot_read_create_update_or_delete_and_no_token_is_unauthenticated(stack):
    inst = await new_instance(stack, "alice")
    turn = await send(stack, inst, "mine", sub="alice")
    fb = await flag(stack, turn.reply.name, "alice's words", sub="alice")
    fbs = stack.feedback()
    await expect_error(flag(stack, turn.reply.name, "bob's words", sub="bob"), grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(trace_id=turn.trace_id, instance=inst, body="bob via trace"), request_id=rid()),
        metadata=stack.md("bob")), grpc.StatusCode.NOT_FOUND)
    assert await list_all(stack, "bob") == []
    await expect_error(get(stack, fb.name, "bob"), grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_DISMISSED), update_mask=field_mask_pb2.FieldMask(
            paths=["status"])), metadata=stack.md("bob")), grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=fb.name), metadata=stack.md("bob")),
                       grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md("bob")),
                       grpc.StatusCode.NOT_FOUND)
    after = await get(stack, fb.name)
    assert after.etag == fb.etag and after.status == pb.STATUS_OPEN and after.body == fb.body
    assert [f.name for f in await list_all(stack, "alice")] == [fb.name]
    await expect_error(fbs.GetFeedback(pb.GetFeedbackRequest(name=fb.name)), grpc.StatusCode.UNAUTHENTICATED)
    # Scopes: the agent-facing token can write but not read; triage needs feedback:triage.
    writer = stack.md("alice", (SCOPE_FEEDBACK_WRITE, "chat"))
    await expect_error(fbs.GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=writer),
                       grpc.StatusCode.PERMISSION_DENIED)
    reader = stack.md("alice", (SCOPE_FEEDBACK_READ,))
    await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED),
        update_mask=field_mask_pb2.FieldMask(paths=["status"])), metadata=reader), grpc.StatusCode.PERMISSION_DENIED)
    await expect_error(fbs.GetFeedbackStats(pb.GetFeedbackStatsRequest(), metadata=reader),
                       grpc.StatusCode.PERMISSION_DENIED)


async def test_update_status_with_etag_stale_etag_is_aborted_with_the_current_row_and_body_is_immutable(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fb = await flag(stack, turn.reply.name, "words")
    fbs = stack.feedback()
    mask = field_mask_pb2.FieldMask(paths=["status"])
    triaged = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED, etag=fb.etag), update_mask=mask),
        metadata=stack.md())
    assert triaged.status == pb.STATUS_TRIAGED and triaged.etag != fb.etag
    e = await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_DISMISSED, etag=fb.etag), update_mask=mask),
        metadata=stack.md()), grpc.StatusCode.ABORTED)
    current = [d for d in status_details(e) if d.Is(pb.Feedback.DESCRIPTOR)]
    assert len(current) == 1
    row = pb.Feedback()
    current[0].Unpack(row)
    assert row.status == pb.STATUS_TRIAGED and row.etag == triaged.etag
    e = await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, body="rewritten"), update_mask=field_mask_pb2.FieldMask(paths=["body"])),
        metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "update_mask"
    filed = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_FILED, issue_url="https://tracker.example/1"),
        update_mask=field_mask_pb2.FieldMask(paths=["status", "issue_url"]), request_id=(r := rid())),
        metadata=stack.md())
    assert filed.issue_url == "https://tracker.example/1"
    # A retry of the same update returns the row, nothing new written.
    again = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_FILED, issue_url="https://tracker.example/1",
                             etag=triaged.etag), update_mask=field_mask_pb2.FieldMask(paths=["status", "issue_url"]),
        request_id=r), metadata=stack.md())
    assert again.etag == filed.etag
    await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED), update_mask=mask), metadata=stack.md()),
        grpc.StatusCode.FAILED_PRECONDITION)
    reopened = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_OPEN), update_mask=mask), metadata=stack.md())
    assert reopened.status == pb.STATUS_OPEN and reopened.body == "words"
    await fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=fb.name), metadata=stack.md())
    await expect_error(get(stack, fb.name), grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=fb.name), metadata=stack.md()),
                       grpc.StatusCode.NOT_FOUND)


async def test_list_filters_and_pages_newest_first_without_repeats(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    made = []
    for i in range(7):
        made.append(await flag(stack, turn.reply.name, f"report {i} {'needle' if i % 3 == 0 else ''}",
                               sentiment=pb.SENTIMENT_BAD if i % 2 else pb.SENTIMENT_GOOD,
                               category=pb.CATEGORY_TOOL_FAILURE if i == 4 else pb.CATEGORY_OTHER))
    pages, token = [], ""
    while True:
        resp = await stack.feedback().ListFeedback(pb.ListFeedbackRequest(page_size=3, page_token=token),
                                                   metadata=stack.md())
        pages.append([f.name for f in resp.feedback])
        token = resp.next_page_token
        if not token:
            break
    flat = [n for p in pages for n in p]
    assert flat == [f.name for f in reversed(made)] and [len(p) for p in pages] == [3, 3, 1]
    assert {f.body for f in await list_all(stack, text="NEEDLE")} == {"report 0 needle", "report 3 needle",
                                                                      "report 6 needle"}
    assert len(await list_all(stack, sentiment=pb.SENTIMENT_BAD)) == 3
    assert [f.body for f in await list_all(stack, category=pb.CATEGORY_TOOL_FAILURE)] == ["report 4 "]
    assert len(await list_all(stack, instance=inst, status=pb.STATUS_OPEN)) == 7
    assert await list_all(stack, author=pb.AUTHOR_AGENT) == []
    future = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    from google.protobuf import timestamp_pb2  # noqa: PLC0415
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(future)
    assert await list_all(stack, start_time=ts) == []
    for bad in ("not-a-token", "eyJ4IjoxfQ"):  # garbage, and base64 of {"x":1}
        e = await expect_error(stack.feedback().ListFeedback(pb.ListFeedbackRequest(page_token=bad),
                                                             metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "page_token"


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


async def test_a_ticket_filed_right_after_the_report_carries_the_turns_tool_calls(stack):
    """The owner flags a reply and a triager files it the same second: FileFeedback waits for the capture
    worker (bounded) so the ticket has the turn's tool calls, not "pending … (none recorded)"."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "How many agents do you have in total? Give me their names.")
    fb = await flag(stack, turn.reply.name, "the count is wrong", category=pb.CATEGORY_TOOL_FAILURE)
    assert fb.trace_snapshot.state == PENDING
    filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    assert filed.trace_snapshot.state == CAPTURED
    ticket = (stack.data_dir / "tickets" / f"{fb.name.removeprefix('feedback/')}.md").read_text()
    assert "list_subordinates" in ticket and "none recorded" not in ticket, ticket


async def test_file_feedback_twice_and_concurrently_files_one_markdown_ticket(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi there")
    fb = await flag(stack, turn.reply.name, "private words of the owner", category=pb.CATEGORY_TOOL_FAILURE)
    fbs = stack.feedback()
    got = await asyncio.gather(*(fbs.FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
                                 for _ in range(5)))
    again = await fbs.FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    urls = {g.issue_url for g in got} | {again.issue_url}
    assert len(urls) == 1 and again.status == pb.STATUS_FILED
    files = list((stack.data_dir / "tickets").glob("*.md"))
    assert len(files) == 1 and files[0].resolve().as_uri() == again.issue_url
    text = files[0].read_text()
    assert fb.name in text and turn.trace_id in text and "tool failure" in text
    assert "private words of the owner" not in text and turn.reply.content[:200] not in text


@pytest.fixture
async def issues_endpoint_imitating_github():
    """A local aiohttp server that imitates GitHub's `POST /repos/{owner}/{repo}/issues` (records calls)."""
    calls: list[dict] = []

    async def create_issue(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == "Bearer gh-test-token"
        payload = await request.json()
        calls.append({"path": request.path, **payload})
        n = len(calls)
        owner, repo = request.match_info["owner"], request.match_info["repo"]
        return web.json_response({"number": n, "html_url": f"https://github.example/{owner}/{repo}/issues/{n}"},
                                 status=201)

    app = web.Application()
    app.router.add_post("/repos/{owner}/{repo}/issues", create_issue)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", calls
    await runner.cleanup()


async def test_file_feedback_to_github_sink_posts_one_issue_with_the_default_fields(
        stack, tmp_path, issues_endpoint_imitating_github):
    api, calls = issues_endpoint_imitating_github
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hello")
    fb = await flag(stack, turn.reply.name, "owner's private complaint", category=pb.CATEGORY_NETWORK)
    srv = await start_feedback(stack, tmp_path, tracker="github", tracker_github_api=api,
                               tracker_github_repo="acme/agent", tracker_github_token="gh-test-token")
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, srv.port))
        first, second = await asyncio.gather(*(stub.FileFeedback(pb.FileFeedbackRequest(name=fb.name),
                                                                 metadata=stack.md()) for _ in range(2)))
        third = await stub.FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    finally:
        await srv.stop(0.5)
    assert len(calls) == 1 and calls[0]["path"] == "/repos/acme/agent/issues"
    assert first.issue_url == second.issue_url == third.issue_url == "https://github.example/acme/agent/issues/1"
    assert "network" in calls[0]["title"] + calls[0]["body"] and turn.trace_id in calls[0]["body"]
    assert "owner's private complaint" not in calls[0]["body"] and turn.reply.content[:200] not in calls[0]["body"]
    assert (await get(stack, fb.name)).status == pb.STATUS_FILED


# ---------------------------------------------------------------- new-user tester findings
async def get_as(stack: Stack, name: str, sub: str) -> pb.Feedback:
    return await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=name),
                                              metadata=stack.md(sub, (SCOPE_FEEDBACK_READ,)))


async def wait_until(fetch, done, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while not done(got := await fetch()):
        assert time.monotonic() < deadline, f"condition never held; last: {got}"
        await asyncio.sleep(0.1)
    return got


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


@pytest.mark.parametrize("field_path, request_kw", [
    ("start_time", {"start_time": {"seconds": -10**12}}),
    ("start_time", {"start_time": {"seconds": 1, "nanos": 2_000_000_000}}),
    ("end_time", {"end_time": {"seconds": 253_402_300_800}}),
    ("end_time", {"end_time": {"seconds": 1, "nanos": -1}}),
    ("start_time", {"start_time": {"seconds": 2_000_000_000}, "end_time": {"seconds": 1_000_000_000}}),
])
async def test_list_feedback_bad_time_range_is_invalid_argument_naming_the_field(stack, field_path, request_kw):
    req = pb.ListFeedbackRequest(**{k: Timestamp(**v) for k, v in request_kw.items()})
    e = await expect_error(stack.feedback().ListFeedback(req, metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == field_path


async def test_list_feedback_page_token_reused_with_other_filters_is_invalid_argument(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    for i in range(3):
        await flag(stack, turn.reply.name, f"report {i}")
    fbs = stack.feedback()
    first = await fbs.ListFeedback(pb.ListFeedbackRequest(page_size=1, instance=inst), metadata=stack.md())
    assert first.next_page_token
    e = await expect_error(fbs.ListFeedback(pb.ListFeedbackRequest(page_size=1, page_token=first.next_page_token),
                                            metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "page_token"
    e = await expect_error(fbs.ListFeedback(pb.ListFeedbackRequest(
        page_size=1, instance=inst, text="report", page_token=first.next_page_token), metadata=stack.md()),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "page_token"
    same = await fbs.ListFeedback(pb.ListFeedbackRequest(page_size=1, instance=inst, page_token=first.next_page_token),
                                  metadata=stack.md())
    assert same.feedback[0].name != first.feedback[0].name


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


async def test_update_retried_after_a_later_update_answers_without_rerunning_and_noops_are_remembered(stack):
    """A triage tool's retry of 'mark TRIAGED' (request id U1, with the etag it had) arrives after a
    colleague already filed the report (U2): the retry writes nothing and answers OK with the report as
    it is — not ABORTED on its old etag, not FAILED_PRECONDITION on FILED → TRIAGED. A no-op update's
    request id is remembered too, so reusing it for another request is refused."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fb, other = await flag(stack, turn.reply.name, "a"), await flag(stack, turn.reply.name, "b")
    fbs, mask = stack.feedback(), field_mask_pb2.FieldMask(paths=["status"])

    def update(name: str, status: int, request_id: str, etag: str = ""):
        return fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
            feedback=pb.Feedback(name=name, status=status, etag=etag), update_mask=mask, request_id=request_id),
            metadata=stack.md())

    u1, u2 = rid(), rid()
    triaged = await update(fb.name, pb.STATUS_TRIAGED, u1, fb.etag)
    filed = await update(fb.name, pb.STATUS_FILED, u2, triaged.etag)
    retry = await update(fb.name, pb.STATUS_TRIAGED, u1, fb.etag)
    assert retry.status == pb.STATUS_FILED and retry.etag == filed.etag  # nothing written, the report as it is
    # The same id for another report, or another request: INVALID_ARGUMENT, nothing written.
    for call in (update(other.name, pb.STATUS_TRIAGED, u1), update(fb.name, pb.STATUS_DISMISSED, u2)):
        e = await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "request_id"
    assert (await get(stack, other.name)).status == pb.STATUS_OPEN
    assert (await get(stack, fb.name)).etag == filed.etag

    # A no-op (already FILED) with a new id changes nothing and still binds the id to its request.
    u3 = rid()
    same = await update(fb.name, pb.STATUS_FILED, u3)
    assert same.etag == filed.etag
    e = await expect_error(update(fb.name, pb.STATUS_OPEN, u3), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id"
    assert (await get(stack, fb.name)).status == pb.STATUS_FILED


async def test_delete_retried_with_the_same_request_id_is_ok_and_the_id_cannot_delete_another_report(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    a = await flag(stack, turn.reply.name, "a")
    b = await flag(stack, turn.reply.name, "b")
    fbs = stack.feedback()
    d = rid()
    await fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name, request_id=d), metadata=stack.md())
    await fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name, request_id=d), metadata=stack.md())  # retry: OK
    await expect_error(get(stack, a.name), grpc.StatusCode.NOT_FOUND)
    e = await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=b.name, request_id=d), metadata=stack.md()),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id"
    assert (await get(stack, b.name)).body == "b"
    # Another owner's retry with the same request id is not alice's record.
    await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name, request_id=d),
                                          metadata=stack.md("mallory")), grpc.StatusCode.NOT_FOUND)
    # Without a request id a second delete is NOT_FOUND, as before.
    await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name), metadata=stack.md()),
                       grpc.StatusCode.NOT_FOUND)


async def test_concurrent_delete_retries_with_one_request_id_all_succeed(stack):
    """A client that retries a DeleteFeedback before the first attempt answered (10 at once, one
    request id): every attempt gets OK, the row is gone, nothing else is touched."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fbs = stack.feedback()
    for _ in range(3):
        a, keep = await flag(stack, turn.reply.name, "a"), await flag(stack, turn.reply.name, "keep")
        d = rid()
        results = await asyncio.gather(*(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name, request_id=d),
                                                            metadata=stack.md()) for _ in range(10)),
                                       return_exceptions=True)
        assert [r for r in results if isinstance(r, Exception)] == []
        await expect_error(get(stack, a.name), grpc.StatusCode.NOT_FOUND)
        assert (await get(stack, keep.name)).body == "keep"


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


@pytest.mark.parametrize("url, ok", [
    ("https://", False), ("https://exa mple.com/", False), ("file:///etc/passwd", False),
    ("javascript:alert(1)", False), ("https://x.example/" + "a" * 2048, False), ("http://[::1", False),
    ("https://tracker.example/issues/7", True), ("http://localhost:8080/t/1?x=y#z", True),
])
async def test_issue_url_must_be_an_absolute_http_url_with_a_host(stack, url, ok):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fb = await flag(stack, turn.reply.name)
    call = stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED, issue_url=url),
        update_mask=field_mask_pb2.FieldMask(paths=["status", "issue_url"])), metadata=stack.md())
    if ok:
        assert (await call).issue_url == url
        return
    e = await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "feedback.issue_url"
    assert (await get(stack, fb.name)).issue_url == "" and (await get(stack, fb.name)).status == pb.STATUS_OPEN


async def test_mcp_instance_messages_rejects_a_malformed_trace_id_and_a_negative_window(stack):
    from mcp.server.mcpserver.exceptions import ToolError  # noqa: PLC0415

    from services.cli.client import Clients, ClientSettings  # noqa: PLC0415
    from services.cli.mcp_server import build_server  # noqa: PLC0415

    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    clients = Clients(settings=ClientSettings(chat_target=f"127.0.0.1:{stack.ports['chat']}",
                                              feedback_target=f"127.0.0.1:{stack.ports['feedback']}",
                                              traces_target=f"127.0.0.1:{stack.ports['query']}"),
                      token=stack.token())
    mcp = build_server(clients)
    try:
        for args, field_path in (({"around_trace_id": "nothex"}, "around_trace_id"), ({"window": -1}, "window")):
            with pytest.raises(ToolError) as e:
                await mcp.call_tool("instance_messages", {"instance": inst, **args})
            assert f"INVALID_ARGUMENT: {field_path}:" in str(e.value)
        with pytest.raises(ToolError) as e:
            await mcp.call_tool("instance_messages", {"instance": inst, "around_trace_id": "ab" * 16})
        assert "NOT_FOUND:" in str(e.value)
        got = await mcp.call_tool("instance_messages", {"instance": inst, "around_trace_id": turn.trace_id.upper(),
                                                         "window": 0})
        assert turn.reply.name in str(got)
    finally:
        for ch in clients.channels:
            await ch.close()


async def test_a_filed_rows_own_file_url_survives_a_status_change_that_sends_it_back_unchanged(stack):
    """The console's triage form sends status and issue_url together; the markdown sink's file:// URL
    is the service's own and stays valid when sent back unchanged (a new file:// URL is still refused)."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fb = await flag(stack, turn.reply.name)
    filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    assert filed.issue_url.startswith("file://") and filed.status == pb.STATUS_FILED
    mask = field_mask_pb2.FieldMask(paths=["status", "issue_url"])
    reopened = await stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_OPEN, issue_url=filed.issue_url, etag=filed.etag),
        update_mask=mask), metadata=stack.md())
    assert reopened.status == pb.STATUS_OPEN and reopened.issue_url == filed.issue_url
    e = await expect_error(stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED, issue_url="file:///etc/passwd"),
        update_mask=mask), metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "feedback.issue_url"
    assert (await get(stack, fb.name)).issue_url == filed.issue_url


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


async def created_events(stack: Stack, trace_id: str) -> list:
    """Every `feedback.created` event on the trace as stored by the collector (after a flush)."""
    await stack.aflush_spans()
    t = await stack.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=trace_id), metadata=stack.md())
    return [(sp, e) for sp in t.spans for e in sp.events if e.name == "feedback.created"]


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
