"""The change feed (WatchFeedback, issue 24) over real gRPC, a real PostgreSQL and real processes: a
subscriber (the `agentfeedback feedback watch` command, its own OS process) killed with SIGKILL and
resumed with its last token misses nothing and never sees an uncommitted change; two feedback server
processes stream the same events in the same order; a token older than the retention is OUT_OF_RANGE
naming the oldest position; scoping like reads.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from google.protobuf import field_mask_pb2

from services.common.auth import SCOPE_FEEDBACK_ADMIN, SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE
from services.common.errors import error_info
from services.common.pages import decode_page_token, encode_page_token
from tests.helpers.feedback import channel_to, expect_error, flag, new_instance, rid, send, start_feedback
from tests.helpers.procs import reported_port, spawn_feedback_process, wait_serving
from tests.stack import Stack

ROOT = Path(__file__).resolve().parents[2]
POS, NEG = pb.RATING_SENTIMENT_POSITIVE, pb.RATING_SENTIMENT_NEGATIVE
CREATED, UPDATED, DELETED, FILED = (pb.FEEDBACK_EVENT_TYPE_CREATED, pb.FEEDBACK_EVENT_TYPE_UPDATED,
                                    pb.FEEDBACK_EVENT_TYPE_DELETED, pb.FEEDBACK_EVENT_TYPE_FILED)


def rating(conversation: str, turn: int, **kw) -> pb.Rating:
    return pb.Rating(conversation=conversation, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction", **kw)


async def put(stack: Stack, r: pb.Rating, sub: str = "alice", port: int | None = None) -> pb.Rating:
    stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, port)) if port else stack.feedback()
    return await stub.PutRating(pb.PutRatingRequest(rating=r, request_id=rid()), metadata=stack.md(sub))


class Subscriber:
    """`agentfeedback feedback watch` as its own OS process, its JSON lines in a file."""

    def __init__(self, stack: Stack, out: Path, port: int, token: str, *args: str):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "gen")])}
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "--feedback", f"127.0.0.1:{port}", "--token", token,
             "feedback", "watch", "--heartbeats", *args], cwd=ROOT, env=env, stdout=out.open("w"),
            stderr=subprocess.PIPE)

    def lines(self) -> list[dict]:
        text = self.out.read_text() if self.out.exists() else ""
        # A SIGKILL may cut the last line: only whole lines count (the resumed process repeats it).
        return [json.loads(x) for x in text.split("\n")[:-1] if x]

    def events(self) -> list[dict]:
        return [x["event"] for x in self.lines() if "event" in x]

    async def wait(self, done, timeout_s: float = 20.0) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while not done(self.events()):
            if self.proc.poll() is not None:
                raise AssertionError(f"subscriber exited {self.proc.returncode}: {self.proc.stderr.read()[-2000:]}")
            assert time.monotonic() < deadline, f"subscriber got only {self.events()}"
            await asyncio.sleep(0.05)
        return self.events()

    async def started(self) -> str:
        """The first heartbeat's token (the stream is open)."""
        deadline = time.monotonic() + 30
        while not self.lines():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.proc.stderr.read()[-2000:]
            await asyncio.sleep(0.05)
        return self.lines()[0]["resumeToken"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def last_token(self) -> str:
        return self.lines()[-1]["resumeToken"]


def _ids(events: list[dict]) -> list[str]:
    return [e["id"] for e in events]


async def _outbox(stack: Stack, owner: str) -> list[str]:
    """Every event id the outbox holds for `owner`, in feed order (what a subscriber must have got)."""
    conn = await asyncpg.connect(stack.database_url, server_settings={"search_path": "feedback"})
    try:
        return [str(r["seq"]) for r in await conn.fetch(
            "SELECT seq FROM feed_events WHERE owner = $1 ORDER BY xid, seq", owner)]
    finally:
        await conn.close()


@pytest.mark.slow
async def test_a_subscriber_killed_and_resumed_misses_nothing_and_never_sees_an_uncommitted_change(stack, tmp_path):
    fb = stack.feedback()
    port = stack.ports["feedback"]
    sub = Subscriber(stack, tmp_path / "a.jsonl", port, stack.token("alice", (SCOPE_FEEDBACK_READ,)))
    await sub.started()
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    report = await flag(stack, t.reply.name, "the answer is wrong")
    r = await put(stack, rating(inst, t.reply.turn_index, sentiment=NEG, note="wrong"))
    other = await put(stack, pb.Rating(conversation=inst, turn_index=t.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE,
                                       aspect="accuracy", sentiment=NEG))
    got = await sub.wait(lambda ev: len(ev) >= 3)
    assert [(e["type"], e["name"]) for e in got[:3]] == [("FEEDBACK_EVENT_TYPE_CREATED", report.name),
                                                         ("FEEDBACK_EVENT_TYPE_CREATED", r.name),
                                                         ("FEEDBACK_EVENT_TYPE_CREATED", other.name)]
    assert got[0]["feedback"]["body"] == "the answer is wrong" and got[1]["rating"]["note"] == "wrong"

    # A change in a transaction that is still open is not sent, and neither is anything committed after
    # it (it could commit before it): the stream waits; the rolled-back change is never sent.
    conn = await asyncpg.connect(stack.database_url, server_settings={"search_path": "feedback"})
    tx = conn.transaction()
    await tx.start()
    await conn.execute("UPDATE ratings SET note = 'uncommitted', version = version + 1 WHERE id = $1",
                       other.name.removeprefix("ratings/"))
    await put(stack, rating(inst, t.reply.turn_index, sentiment=POS, note="right after all"))
    await asyncio.sleep(1.0)
    n_before = len(sub.events())
    await tx.rollback()
    await conn.close()
    got = await sub.wait(lambda ev: len(ev) >= 4)
    assert n_before == 3, "an event committed after an open transaction began was sent before it ended"
    assert got[3]["rating"]["note"] == "right after all" and got[3]["type"] == "FEEDBACK_EVENT_TYPE_UPDATED"
    assert all(e.get("rating", {}).get("note") != "uncommitted" for e in got)

    # Killed mid-stream; what happens while it is down comes after it resumes with its last token.
    token = sub.last_token()
    sub.kill()
    await fb.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=report.name, status=pb.STATUS_TRIAGED),
        update_mask=field_mask_pb2.FieldMask(paths=["status"])), metadata=stack.md())
    await fb.FileFeedback(pb.FileFeedbackRequest(name=report.name, request_id=rid()), metadata=stack.md())
    fork = await stack.chat().ForkConversation(
        chat_pb2.ForkConversationRequest(parent=inst, turn_index=t.reply.turn_index, request_id=rid()),
        metadata=stack.md())
    await fb.DeleteRating(pb.DeleteRatingRequest(name=r.name), metadata=stack.md())
    again = Subscriber(stack, tmp_path / "b.jsonl", port, stack.token("alice", (SCOPE_FEEDBACK_READ,)),
                       "--resume-token", token)
    expected = await _outbox(stack, "alice")
    got2 = await again.wait(lambda ev: set(_ids(got) + _ids(ev)) >= set(expected))
    again.kill()
    everything = _ids(got) + [i for i in _ids(got2) if i not in _ids(got)]
    assert everything == expected  # nothing missed, nothing uncommitted, in the feed's one order
    kinds = [(e["type"], e.get("branchCopy", False)) for e in got2]
    assert ("FEEDBACK_EVENT_TYPE_FILED", False) in kinds and ("FEEDBACK_EVENT_TYPE_DELETED", False) in kinds
    copies = [e for e in got2 if e.get("branchCopy")]
    assert len(copies) == 2 and {c["rating"]["conversation"] for c in copies} == {fork.instance.name}
    assert {c["rating"]["origin"] for c in copies} == {"RATING_ORIGIN_BRANCH_COPY"}
    deleted = [e for e in got2 if e["type"] == "FEEDBACK_EVENT_TYPE_DELETED"]
    assert deleted[0]["name"] == r.name and "rating" not in deleted[0]  # gone: the name only


@pytest.mark.slow
async def test_two_feedback_processes_stream_the_same_events_in_the_same_order(stack, tmp_path):
    log = tmp_path / "second.log"
    proc = spawn_feedback_process(stack, 0, log)
    admin = stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
    try:
        port2 = await reported_port(log, proc, r"FeedbackService listening on port (\d+)")
        await wait_serving(port2, proc, log)
        stubs = [stack.feedback(), feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, port2))]
        streams = [s.WatchFeedback(pb.WatchFeedbackRequest(), metadata=admin) for s in stubs]
        for s in streams:
            assert (await s.read()).HasField("heartbeat_time")  # open, positioned at now
        inst = await new_instance(stack)
        turns = [await send(stack, inst, f"turn {i}") for i in range(3)]
        # Writes through both replicas, some at once: each stream is woken by the other replica's too.
        await asyncio.gather(*(put(stack, rating(inst, t.reply.turn_index, sentiment=POS, note=f"via {p}"), port=p)
                               for t in turns for p in (stack.ports["feedback"], port2)))
        await flag(stack, turns[0].reply.name, "second thoughts")
        expected = await _outbox(stack, "alice")
        assert len(expected) == 7  # per turn a create and an update (either replica first), and the report

        async def collect(s) -> list[str]:
            ids: list[str] = []
            while len(ids) < len(expected):
                m = await asyncio.wait_for(s.read(), 15)
                if m.HasField("event"):
                    ids.append(m.event.id)
            return ids

        got = await asyncio.gather(*(collect(s) for s in streams))
        assert got[0] == got[1] == expected
        for s in streams:
            s.cancel()
    finally:
        proc.terminate()
        proc.wait(timeout=15)


async def test_a_token_older_than_the_retention_is_out_of_range_naming_the_oldest_position(stack):
    fb = stack.feedback()
    md = stack.md("alice", (SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE))
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    first = fb.WatchFeedback(pb.WatchFeedbackRequest(), metadata=md)
    old_token = (await first.read()).resume_token
    await put(stack, rating(inst, t.reply.turn_index, sentiment=POS))
    ev = await first.read()
    assert ev.event.type == CREATED
    first.cancel()
    # Fifteen days later (the default retention is 14), a retention pass deletes it.
    deleted = await stack.servers["feedback"].feed.prune(now=dt.datetime.now(dt.UTC) + dt.timedelta(days=15))
    assert deleted >= 1
    await put(stack, rating(inst, t.reply.turn_index, sentiment=NEG))
    e = await expect_error(_first_event(fb, pb.WatchFeedbackRequest(resume_token=old_token), md),
                           grpc.StatusCode.OUT_OF_RANGE)
    info = error_info(e)
    assert info.reason == "RESUME_TOKEN_EXPIRED" and info.metadata["retention_days"] == "14"
    assert "oldest_resume_token" in info.metadata and info.metadata["oldest_time"].endswith("Z")
    # The named position works: the change made after the pass is there, the deleted one is not.
    m = await _first_event(fb, pb.WatchFeedbackRequest(resume_token=info.metadata["oldest_resume_token"]), md)
    assert m.event.type == UPDATED and m.event.rating.sentiment == NEG
    # The token after the deleted event still resumes (nothing after it was lost).
    m = await _first_event(fb, pb.WatchFeedbackRequest(resume_token=ev.resume_token), md)
    assert m.event.rating.sentiment == NEG


async def _first_event(stub, request, md) -> pb.WatchFeedbackResponse:
    call = stub.WatchFeedback(request, metadata=md)
    try:
        while True:
            m = await asyncio.wait_for(call.read(), 10)
            if m.HasField("event"):
                return m
    finally:
        call.cancel()


async def test_the_feed_is_scoped_like_reads(stack):
    fb = stack.feedback()
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    bob_inst = await new_instance(stack, "bob")
    bob_t = await send(stack, bob_inst, "hi", sub="bob")
    start = (await _heartbeat(fb, stack.md("ops", (SCOPE_FEEDBACK_ADMIN,)))).resume_token
    await flag(stack, t.reply.name, "alice's words")
    await put(stack, rating(bob_inst, bob_t.reply.turn_index, sentiment=NEG, note="bob's words"), sub="bob")
    # Bob sees his own rating, with his words; never alice's report.
    m = await _first_event(fb, pb.WatchFeedbackRequest(resume_token=start), stack.md("bob", (SCOPE_FEEDBACK_READ,)))
    assert m.event.owner == "bob" and m.event.rating.note == "bob's words" and not m.event.text_omitted
    # An admin sees both, without the owners' words unless asked (and then the read is audited).
    admin = stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
    call = fb.WatchFeedback(pb.WatchFeedbackRequest(resume_token=start), metadata=admin)
    seen = [m for m in [await call.read() for _ in range(3)] if m.HasField("event")]
    call.cancel()
    assert [m.event.owner for m in seen] == ["alice", "bob"]
    assert seen[0].event.text_omitted and seen[0].event.feedback.body == "" and seen[0].event.feedback.snapshot.target_text == ""
    assert seen[1].event.text_omitted and seen[1].event.rating.note == ""
    m = await _first_event(fb, pb.WatchFeedbackRequest(resume_token=start, include_text=True, owner="alice"), admin)
    assert m.event.feedback.body == "alice's words" and not m.event.text_omitted
    audit = await fb.ListAuditRecords(pb.ListAuditRecordsRequest(), metadata=admin)
    assert [(a.action, a.method) for a in audit.audit_records][:1] == [
        (pb.AUDIT_ACTION_READ_BODY, "/agentfeedback.feedback.v1.FeedbackService/WatchFeedback")]
    # Filters: only ratings of an aspect.
    m = await _first_event(fb, pb.WatchFeedbackRequest(resume_token=start, kind=pb.FEEDBACK_EVENT_KIND_RATING,
                                                        aspect="reaction"), admin)
    assert m.event.owner == "bob"
    # Not for an owner: another owner's events, include_text; bad tokens and filters name the field.
    for req in (pb.WatchFeedbackRequest(owner="alice"), pb.WatchFeedbackRequest(include_text=True)):
        await expect_error(_first_event(fb, req, stack.md("bob", (SCOPE_FEEDBACK_READ,))),
                           grpc.StatusCode.PERMISSION_DENIED)
    await expect_error(_first_event(fb, pb.WatchFeedbackRequest(), stack.md("bob", (SCOPE_FEEDBACK_WRITE,))),
                       grpc.StatusCode.PERMISSION_DENIED)
    # A forged position (unsigned, as tokens were before they were signed; or edited, MAC kept) names the field.
    payload, _, mac = start.partition(".")
    moved = {**decode_page_token(payload), "x": 1, "s": 0}
    for forged in (encode_page_token({"x": 1, "s": 0}), f"{encode_page_token(moved)}.{mac}"):
        e = await expect_error(_first_event(fb, pb.WatchFeedbackRequest(resume_token=forged), admin),
                               grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "resume_token"
    for req, field in ((pb.WatchFeedbackRequest(resume_token="bm90IG91cnM"), "resume_token"),
                       (pb.WatchFeedbackRequest(aspect="Not A Slug"), "aspect"),
                       (pb.WatchFeedbackRequest(kind=9), "kind")):
        e = await expect_error(_first_event(fb, req, admin), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == field


async def _heartbeat(stub, md) -> pb.WatchFeedbackResponse:
    call = stub.WatchFeedback(pb.WatchFeedbackRequest(), metadata=md)
    try:
        return await asyncio.wait_for(call.read(), 10)
    finally:
        call.cancel()


async def test_an_idle_stream_gets_heartbeats_and_a_stopping_replica_ends_its_streams_unavailable(stack, tmp_path):
    server = await start_feedback(stack, tmp_path / "hb", run_worker=False, feed_heartbeat_s=0.3)
    stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, server.port))
    call = stub.WatchFeedback(pb.WatchFeedbackRequest(), metadata=stack.md("ops", (SCOPE_FEEDBACK_ADMIN,)))
    t0 = time.monotonic()
    beats = [await asyncio.wait_for(call.read(), 5) for _ in range(4)]
    assert all(b.HasField("heartbeat_time") and b.resume_token for b in beats)
    assert 0.7 < time.monotonic() - t0 < 4.0  # three intervals of 0.3 s after the first
    stopping = asyncio.ensure_future(server.stop(5.0))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        while True:
            await asyncio.wait_for(call.read(), 5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    await stopping


@pytest.mark.slow
async def test_watch_resumes_by_itself_when_its_replica_is_killed_and_misses_nothing(stack, tmp_path):
    """`agentfeedback feedback watch` used to exit 1 ("UNAVAILABLE: Stream removed") whenever the replica
    it streamed from restarted, leaving the user to dig the last token out of its output. Now it
    resumes after the last position it printed: the replica SIGKILLed and started again on the same
    port, the one watch process gets every event of the outbox once, in order, and says it resumed."""
    first_log = tmp_path / "replica-1.log"
    proc = spawn_feedback_process(stack, 0, first_log)
    procs = [proc]
    try:
        port = await reported_port(first_log, proc, r"FeedbackService listening on port (\d+)")
        await wait_serving(port, proc, first_log)
        sub = Subscriber(stack, tmp_path / "w.jsonl", port, stack.token("watcher", (SCOPE_FEEDBACK_READ,)))
        await sub.started()
        inst = await new_instance(stack, "watcher")
        t = await send(stack, inst, "hello", sub="watcher")
        await put(stack, rating(inst, t.reply.turn_index, sentiment=NEG, note="before"), sub="watcher")
        await sub.wait(lambda ev: len(ev) >= 1)

        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # Written while the watched replica is down (through the stack's own one): sent after it resumes.
        await put(stack, rating(inst, t.reply.turn_index, sentiment=POS, note="while down"), sub="watcher")
        await flag(stack, t.reply.name, "the answer is wrong", sub="watcher")
        second_log = tmp_path / "replica-2.log"
        procs.append(spawn_feedback_process(stack, port, second_log))
        await wait_serving(port, procs[-1], second_log)
        await put(stack, rating(inst, t.reply.turn_index, sentiment=NEG, note="after"), sub="watcher")

        expected = await _outbox(stack, "watcher")  # (the report's evidence capture may add an UPDATED)
        got = await sub.wait(lambda ev: len(ev) >= len(expected), timeout_s=60)
        assert sub.proc.poll() is None, "watch exited when its replica was killed"
        sub.kill()
        ids = _ids(sub.events())
        assert ids[:len(expected)] == expected and len(set(ids)) == len(ids)  # once each, in the feed's order
        assert "resuming from the last position received" in sub.proc.stderr.read().decode()
        assert [e["type"] for e in got if e["kind"] == "FEEDBACK_EVENT_KIND_RATING"] == [
            "FEEDBACK_EVENT_TYPE_CREATED", "FEEDBACK_EVENT_TYPE_UPDATED", "FEEDBACK_EVENT_TYPE_UPDATED"]
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=15)
