"""PostgreSQL frozen (SIGSTOP to the postmaster and every backend: the server is there, it answers
nothing) under calls with and without a deadline, as an SRE would see it (issue 25: calls without a
deadline hung 40-44 s of a 45 s freeze, past the command timeout; calls with a 5 s deadline got
DEADLINE_EXCEEDED without RetryInfo):

- a call without a deadline answers UNAVAILABLE DATABASE_UNAVAILABLE with RetryInfo within the
  command timeout (here 3 s) and a little, pool acquires included (more calls than connections);
- a call with a deadline answers UNAVAILABLE DATABASE_UNAVAILABLE with RetryInfo before it, not
  DEADLINE_EXCEEDED;
- PutRating asks the chat service who owns the rated turn (within feedback's chat_timeout_s, 2 s), and
  chat's own database is frozen too: the answer names the database (DATABASE_UNAVAILABLE, via chat),
  never CHAT_UNAVAILABLE while chat runs (issue 25: chat's database wait ended 0.2 s before feedback
  gave up on chat, and under load its answer came later than that). Chat's wait is bounded by the
  deadline feedback sent it less a reserve for answering (services/common/deadlines.py). The
  ownership check is not cached here (every put asks chat) and the write quota is off (its statement
  would answer DATABASE_UNAVAILABLE before chat is asked);
- after SIGCONT the same calls succeed.
Its own cluster (as test_database_outage.py), so freezing it leaves every other test's database alone.
"""
from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.traces.v1 import traces_pb2
from services.common.db import embedded_postgres_server
from services.common.errors import error_info, status_details
from tests.stack import start_stack

COMMAND_TIMEOUT_S = 3.0
# What a call may take past the command timeout: answering, the release of its connection.
SLACK_S = 1.5
DEADLINE_S = 2.0
pytestmark = pytest.mark.slow


def _cluster_pids(pgdata: Path) -> list[int]:
    """The postmaster and every process it started (backends, checkpointer, walwriter, …)."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(entry))
    return [postmaster, *children]


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


async def _outcome(call, timeout: float | None) -> tuple[float, grpc.StatusCode, str, bool]:
    """(seconds taken, code, ErrorInfo reason, RetryInfo present)."""
    t0 = time.monotonic()
    try:
        await call(timeout)
        return time.monotonic() - t0, grpc.StatusCode.OK, "", False
    except grpc.aio.AioRpcError as e:
        info = error_info(e)
        retry = any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status_details(e))
        return time.monotonic() - t0, e.code(), info.reason if info else "", retry


async def test_a_frozen_database_is_unavailable_with_retry_info_within_the_bound_with_and_without_deadlines(tmp_path):
    pgdata = Path(tempfile.mkdtemp(prefix="af-freeze-pg-")) / "pg"
    pg = embedded_postgres_server(pgdata, cleanup_mode="delete")
    bounded = {"db_command_timeout_s": COMMAND_TIMEOUT_S}
    feedback = {**bounded, "write_quota_per_minute": 0, "rating_check_cache_s": 0}
    stack = await start_stack(pg.get_uri("postgres"), tmp_path / "data", chat=bounded, feedback=feedback,
                              collector=bounded)
    pids: list[int] = []
    try:
        md = stack.md()
        chat, fb, traces = stack.chat(), stack.feedback(), stack.traces()
        inst = (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="freeze", agent="reference")), metadata=md)).name
        turn = await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content="hello",
                                                                  request_id=str(uuid.uuid4())), metadata=md)
        await stack.wait_trace(turn.trace_id)
        rating = pb.Rating(conversation=inst, turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE,
                           aspect="reaction", sentiment=pb.RATING_SENTIMENT_NEGATIVE)
        calls = {
            "GetInstance": lambda t: chat.GetInstance(chat_pb2.GetInstanceRequest(name=inst), metadata=md, timeout=t),
            "ListFeedback": lambda t: fb.ListFeedback(pb.ListFeedbackRequest(page_size=5), metadata=md, timeout=t),
            "CreateFeedback": lambda t: fb.CreateFeedback(pb.CreateFeedbackRequest(
                feedback=pb.Feedback(message=turn.reply.name, body="frozen"), request_id=str(uuid.uuid4())),
                metadata=md, timeout=t),
            "GetTrace": lambda t: traces.GetTrace(traces_pb2.GetTraceRequest(trace_id=turn.trace_id), metadata=md,
                                                  timeout=t),
        }
        def put_rating(t):
            return fb.PutRating(pb.PutRatingRequest(rating=rating, request_id=str(uuid.uuid4())), metadata=md, timeout=t)

        for call in (*calls.values(), put_rating):  # warm: every pool has connections open to the server being frozen
            await call(10)

        pids = _cluster_pids(pgdata)
        _signal_all(pids, signal.SIGSTOP)
        pids = sorted(set(pids) | set(_cluster_pids(pgdata)))  # anything forked meanwhile
        _signal_all(pids, signal.SIGSTOP)
        # More calls than a pool has connections (10): the rest wait in the pool's acquire.
        no_deadline = [(what, _outcome(call, None)) for what, call in calls.items() for _ in range(4)]
        no_deadline += [("ListFeedback", _outcome(calls["ListFeedback"], None)) for _ in range(12)]
        no_deadline += [("PutRating", _outcome(put_rating, None)) for _ in range(4)]
        with_deadline = [(what, _outcome(call, DEADLINE_S)) for what, call in calls.items()]
        names = [w for w, _ in no_deadline] + [w for w, _ in with_deadline]
        got = await asyncio.wait_for(asyncio.gather(*(c for _, c in no_deadline), *(c for _, c in with_deadline)),
                                     COMMAND_TIMEOUT_S * 4 + 10)
        # Still frozen: a rating with a deadline, its chat call's deadline the nearer (feedback keeps its
        # reserve), chat's database wait nearer still (chat keeps its own).
        ratings = await asyncio.wait_for(asyncio.gather(*(_outcome(put_rating, t) for t in (None, DEADLINE_S))),
                                         COMMAND_TIMEOUT_S * 2 + 10)
        _signal_all(pids, signal.SIGCONT)
        pids = []

        answers = list(zip(names, got, strict=True))
        for what, (took, code, reason, retry) in answers[: len(no_deadline)]:
            assert (code, reason, retry) == (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE", True), (what, code, reason)
            assert took <= COMMAND_TIMEOUT_S + SLACK_S, (what, round(took, 2))
        for what, (took, code, reason, retry) in answers[len(no_deadline):]:
            assert (code, reason, retry) == (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE", True), (what, code, reason)
            assert took < DEADLINE_S, (what, round(took, 2))
        for deadline, (took, code, reason, retry) in zip((None, DEADLINE_S), ratings, strict=True):
            assert (code, reason, retry) == (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE", True), (deadline, code,
                                                                                                     reason, took)
            assert took < (deadline or COMMAND_TIMEOUT_S + SLACK_S), (deadline, round(took, 2))

        # Thawed: every call succeeds again, within a few seconds.
        for what, call in (*calls.items(), ("PutRating", put_rating)):
            end = time.monotonic() + 10
            while True:
                took, code, reason, _ = await _outcome(call, 5)
                if code == grpc.StatusCode.OK:
                    break
                assert time.monotonic() < end, (what, code, reason)
                await asyncio.sleep(0.1)
    finally:
        _signal_all(pids, signal.SIGCONT)
        await stack.stop()
        await asyncio.to_thread(pg.cleanup)
