"""The `agentfeedback` CLI against the real stack: the evidence bundle survives span expiry, the
waterfall, resolve, export."""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from tests.helpers import otlp
from tests.helpers.cli import _cli

CAPTURED = feedback_pb2.TRACE_SNAPSHOT_STATE_CAPTURED


async def _flagged_turn(stack, body: str = "The list stops halfway; it lost people."):
    chat = stack.chat()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="ops", agent="reference")), metadata=stack.md("alice"))
    await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="hello there",
                                                       request_id=str(uuid.uuid4())), metadata=stack.md("alice"))
    turn = await chat.SendMessage(chat_pb2.SendMessageRequest(
        instance=inst.name, content="list my subordinates", channel=chat_pb2.CHANNEL_VOICE, audio_key="audio/77",
        dictation="list my sub or dinates", request_id=str(uuid.uuid4())), metadata=stack.md("alice"))
    fb = await stack.feedback().CreateFeedback(feedback_pb2.CreateFeedbackRequest(
        feedback=feedback_pb2.Feedback(message=turn.reply.name, body=body,
                                       sentiment=feedback_pb2.SENTIMENT_BAD, category=feedback_pb2.CATEGORY_TOOL_FAILURE),
        request_id=str(uuid.uuid4())), metadata=stack.md("alice"))
    await stack.wait_trace(turn.trace_id, min_spans=3)
    deadline = time.monotonic() + 20
    while (got := await stack.feedback().GetFeedback(feedback_pb2.GetFeedbackRequest(name=fb.name),
                                                      metadata=stack.md("alice"))).trace_snapshot.state != CAPTURED:
        assert time.monotonic() < deadline, "trace snapshot never captured"
        await asyncio.sleep(0.1)
    return turn, got


async def test_feedback_show_after_span_expiry_still_prints_frozen_tool_calls(stack):
    turn, fb = await _flagged_turn(stack)
    fid = fb.name.removeprefix("feedback/")
    live = await _cli(stack, "trace", "get", turn.trace_id)
    assert live.exit_code == 0 and "tool.call" in live.output and "chat.in" in live.output

    # 15 days later: the collector drops the day's partition.
    await stack.servers["collector"].retention.run_once(now_ns=time.time_ns() + 15 * 86400 * 10**9)
    gone = await _cli(stack, "trace", "get", turn.trace_id)
    assert gone.exit_code == 1 and "NOT_FOUND" in gone.output

    shown = await _cli(stack, "feedback", "show", fid)
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert "The list stops halfway; it lost people." in out
    assert "list my subordinates" in out and "audio/77" in out and "list my sub or dinates" in out
    assert turn.trace_id in out
    for tc in fb.trace_snapshot.tool_calls:
        assert tc.name in out and tc.call_id in out
    assert "list_subordinates" in out and "chat.truncated" in out

    plain = await _cli(stack, "feedback", "show", fid, "--plain")
    assert plain.exit_code == 0 and "list_subordinates" in plain.output


async def test_list_resolve_export_and_owner_scope(stack, tmp_path):
    _, fb = await _flagged_turn(stack)
    fid = fb.name.removeprefix("feedback/")
    listed = await _cli(stack, "feedback", "list", "--status", "open")
    assert fid in listed.output and fb.snapshot.trace_id in listed.output
    assert fid not in (await _cli(stack, "feedback", "list", sub="mallory")).output
    assert (await _cli(stack, "feedback", "show", fid, sub="mallory")).exit_code == 1

    res = await _cli(stack, "feedback", "resolve", fid, "--status", "triaged")
    assert res.exit_code == 0 and "STATUS_TRIAGED" in res.output
    # The issue URL alone: the status stays as it is.
    url = "https://github.example/o/r/issues/7"
    res = await _cli(stack, "feedback", "resolve", fid, "--issue-url", url)
    assert res.exit_code == 0 and f"STATUS_TRIAGED {url}" in res.output, res.output
    nothing = await _cli(stack, "feedback", "resolve", fid)
    assert nothing.exit_code == 2 and "--status, --issue-url or both" in nothing.output
    out = tmp_path / "all.jsonl"
    exp = await _cli(stack, "feedback", "export", "-o", str(out))
    assert exp.exit_code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["name"] for r in rows] == [fb.name] and rows[0]["status"] == "STATUS_TRIAGED"
    assert rows[0]["body"] == "The list stops halfway; it lost people."


async def test_feedback_delete_removes_the_report_for_its_owner_only(stack):
    _, fb = await _flagged_turn(stack)
    fid = fb.name.removeprefix("feedback/")
    # Another owner cannot delete it (NOT_FOUND, exit 1); without --yes nothing happens.
    refused = await _cli(stack, "feedback", "delete", fid, "--yes", sub="mallory")
    assert refused.exit_code == 1 and "NOT_FOUND" in refused.output
    unconfirmed = await _cli(stack, "feedback", "delete", fid)
    assert unconfirmed.exit_code == 1
    assert (await _cli(stack, "feedback", "show", fid)).exit_code == 0
    done = await _cli(stack, "feedback", "delete", fid, "--yes")
    assert done.exit_code == 0 and f"{fb.name}: deleted" in done.output
    gone = await _cli(stack, "feedback", "show", fid)
    assert gone.exit_code == 1 and "NOT_FOUND" in gone.output


HOSTILE = "\x07\x1b[2J\x1b]0;pwned\x07\r\n\u202egnp.exe\u2066x\u2069\u200e\u200f\ufeff\x9b31m"
RAW_CONTROLS = ["\x07", "\x1b", "\r", "\u202e", "\u2066", "\u2069", "\u200e", "\u200f", "\ufeff", "\x9b"]


def _no_raw_controls(out: str) -> None:
    for ch in RAW_CONTROLS:
        assert ch not in out, f"raw {ch!r} reached the terminal"
    assert "\\x1b[2J" in out and "\\u202e" in out  # shown escaped, visibly


async def test_owners_words_with_terminal_escapes_are_printed_escaped(stack):
    _, fb = await _flagged_turn(stack, body=f"bad {HOSTILE} words")
    fid = fb.name.removeprefix("feedback/")
    for args in (("feedback", "list"), ("feedback", "show", fid), ("feedback", "show", fid, "--plain")):
        got = await _cli(stack, *args)
        assert got.exit_code == 0, got.output
        assert fid in got.output or "bad" in got.output
        _no_raw_controls(got.output)


async def test_span_names_and_attributes_with_terminal_escapes_are_printed_escaped(stack):
    tid, root = otlp.new_trace_id(), otlp.new_span_id()
    spans = [otlp.span(tid, root, name=f"chat.turn{HOSTILE}", attrs={"enduser.id": "alice"}),
             otlp.span(tid, otlp.new_span_id(), parent=root, name="tool.call",
                       attrs={"gen_ai.tool.name": f"ls{HOSTILE}", "enduser.id": "alice"},
                       events=[trace_pb2.Span.Event(name=f"ev{HOSTILE}", time_unix_nano=time.time_ns() - 60 * 10**9,
                                                    attributes=[otlp.kv("k", HOSTILE)])])]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.ports['otlp_grpc']}") as ch:
        await trace_service_pb2_grpc.TraceServiceStub(ch).Export(otlp.request(spans, service=f"svc{HOSTILE}"))
    await stack.wait_trace(tid.hex(), min_spans=2)
    got = await _cli(stack, "trace", "get", tid.hex())
    assert got.exit_code == 0, got.output
    assert "chat.turn" in got.output and "ev" in got.output
    _no_raw_controls(got.output)
