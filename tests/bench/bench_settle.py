"""Evidence settles (issue 16): the chat process is SIGKILLed holding its buffered `chat.turn` span right
after a report on the turn; how long until the report's evidence is frozen (incomplete, naming what is
missing), with the default settle wait (`AGENTFEEDBACK_FEEDBACK_CAPTURE_SETTLE_S` = 60 s).
Figures: `capture_settle_after_kill_s` (turn → frozen; target ≈ the settle wait plus one poll, was
14.4 minutes before), `capture_settle_bound_s` (the configured wait, the floor of this figure).
"""
from __future__ import annotations

import asyncio
import time

import grpc

from agentfeedback.chat.v1 import chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.feedback.settings import FeedbackSettings
from tests.helpers.process_stack import make_procs, report_then_kill_chat, start_with_buffered_chat


SETTLE_S: float | None = None  # the settle wait; None: the service's default
CAPTURE_POLL_S: float | None = None  # the capture worker's poll and retry delay; None: the defaults
SMOKE = {"SETTLE_S": 2.0, "CAPTURE_POLL_S": 0.2}


async def run(ctx) -> dict[str, float]:
    bound = SETTLE_S if SETTLE_S is not None else FeedbackSettings.model_fields["capture_settle_s"].default
    poll = {} if CAPTURE_POLL_S is None else {"AGENTFEEDBACK_FEEDBACK_CAPTURE_POLL_S": str(CAPTURE_POLL_S),
                                              "AGENTFEEDBACK_FEEDBACK_CAPTURE_BACKOFF_S": str(CAPTURE_POLL_S)}
    procs = make_procs(await ctx.new_database(), ctx.tmp / "settle", AGENTFEEDBACK_FEEDBACK_CAPTURE_SETTLE_S=str(bound),
                       **poll)
    try:
        await start_with_buffered_chat(procs)
        md = procs.md()
        async with grpc.aio.insecure_channel(procs.target("chat")) as cch, \
                grpc.aio.insecure_channel(procs.target("feedback")) as fch:
            chat, fb = chat_pb2_grpc.ChatServiceStub(cch), feedback_pb2_grpc.FeedbackServiceStub(fch)
            _, report, t0 = await report_then_kill_chat(procs, chat, fb)
            while True:
                got = await fb.GetFeedback(pb.GetFeedbackRequest(name=report.name), metadata=md)
                if got.trace_snapshot.state != pb.TRACE_SNAPSHOT_STATE_PENDING:
                    break
                if time.monotonic() - t0 > bound + 120:
                    raise RuntimeError("the evidence did not settle within the bound + 2 minutes")
                await asyncio.sleep(0.2)
            settle = time.monotonic() - t0
            if list(got.trace_snapshot.missing) != ["chat.turn", "chat.in", "chat.out"]:
                raise RuntimeError(f"unexpected copy: {pb.TraceSnapshotState.Name(got.trace_snapshot.state)} "
                                   f"missing {list(got.trace_snapshot.missing)}")
    finally:
        await asyncio.to_thread(procs.stop_all)
    return {"capture_settle_after_kill_s": round(settle, 1), "capture_settle_bound_s": bound}
