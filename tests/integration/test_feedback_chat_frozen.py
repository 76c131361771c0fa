"""CreateFeedback while the chat service is frozen (SIGSTOP: its port still accepts connections, nothing
answers). The feedback service waits `chat_timeout_s` (2 s) for the quoted turn; its UNAVAILABLE then
carries gRPC's retry pushback "not at once", so a client whose retry policy repeats CreateFeedback (the
CLI's, the MCP server's, the services' channels) gets the answer after one wait, not four (9.4 s)."""
from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import grpc

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.common.errors import error_info
from services.common.retry_policy import service_config
from tests.helpers.otlp import grpc_retry_delay_s
from tests.helpers.process_stack import make_procs

CHAT_TIMEOUT_S = 2.0  # the feedback service's default chat_timeout_s
MARGIN_S = 1.0


async def test_create_feedback_with_the_chat_service_frozen_answers_unavailable_within_the_chat_timeout(
        database_url, tmp_path):
    procs = make_procs(database_url, tmp_path)
    try:
        await procs.start("collector", OTEL_TRACES_EXPORTER="none")
        await procs.start("agent")
        chat_proc = await procs.start("chat")
        await procs.start("feedback")
        md = procs.md()
        as_the_cli = [("grpc.service_config", service_config(round_robin=False))]  # its retry policy
        async with grpc.aio.insecure_channel(procs.target("chat")) as cch, \
                grpc.aio.insecure_channel(procs.target("feedback"), options=as_the_cli) as fch:
            chat, fb = chat_pb2_grpc.ChatServiceStub(cch), feedback_pb2_grpc.FeedbackServiceStub(fch)
            inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
                instance=chat_pb2.Instance(display_name="k", agent="reference")), metadata=md)
            turn = await chat.SendMessage(chat_pb2.SendMessageRequest(
                instance=inst.name, content="hello", request_id=str(uuid.uuid4())), metadata=md)

            def report(body: str, **kw) -> pb.CreateFeedbackRequest:
                return pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body=body),
                                                request_id=str(uuid.uuid4()), **kw)

            await fb.CreateFeedback(report("while chat answers"), metadata=md)  # its channel to chat is READY
            os.kill(chat_proc.pid, signal.SIGSTOP)
            try:
                for attempt in ("first", "second"):
                    t0 = time.monotonic()
                    try:
                        await fb.CreateFeedback(report("wrong"), metadata=md, timeout=30)
                        raise AssertionError("CreateFeedback succeeded without the quoted turn or a client snapshot")
                    except grpc.aio.AioRpcError as e:
                        took = time.monotonic() - t0
                        assert e.code() == grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())
                        assert error_info(e).reason == "CHAT_UNAVAILABLE"
                        assert grpc_retry_delay_s(e) == 1.0
                    assert took < CHAT_TIMEOUT_S + MARGIN_S, (attempt, took)  # was 9.4 s the first time
                # With the client's snapshot the report is stored, as fast.
                t0 = time.monotonic()
                stored = await fb.CreateFeedback(report("wrong", client_snapshot=pb.Snapshot(
                    target_role="ROLE_ASSISTANT", target_text=turn.reply.content)), metadata=md, timeout=30)
                assert stored.name and time.monotonic() - t0 < CHAT_TIMEOUT_S + MARGIN_S
            finally:
                os.kill(chat_proc.pid, signal.SIGCONT)
    finally:
        await asyncio.to_thread(procs.stop_all)
