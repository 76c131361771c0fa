"""CreateFeedback through the gRPC-web gateway (real Envoy) while the chat service is frozen (a real
chat process SIGSTOPped: its port accepts connections, nothing answers). The feedback service waits its
chat timeout (2 s) once and answers UNAVAILABLE CHAT_UNAVAILABLE; Envoy's route retries (CreateFeedback
is safe to repeat: `retry_on: ...,unavailable`, 2 retries) must not wait it out again per retry (was
3 × 2 s), as native gRPC clients do not (tests/integration/test_feedback_chat_frozen.py). An UNAVAILABLE
answered at once (chat's process gone: connection refused) is still retried by Envoy."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
import uuid

import grpc
import httpx

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.cli.envoy import GatewayPorts, start_envoy
from tests.helpers.grpcweb import ALLOWED_ORIGIN, FEEDBACK, call
from tests.helpers.process_stack import make_procs

UNAVAILABLE = 14
CHAT_TIMEOUT_S = 2.0  # the feedback service's default chat_timeout_s
MARGIN_S = 1.0


def _retries(envoy_dir) -> int:
    """Envoy's count of retried requests to the feedback cluster (admin /stats, counter
    cluster.feedback.upstream_rq_retry)."""
    admin = (envoy_dir / "admin-address").read_text().strip()
    with urllib.request.urlopen(f"http://{admin}/stats?format=json&filter=^cluster\\.feedback\\.upstream_rq_retry$",
                                timeout=5) as r:  # noqa: S310 - loopback
        stats = json.load(r)["stats"]
    return sum(int(s.get("value", 0)) for s in stats if s.get("name") == "cluster.feedback.upstream_rq_retry")


async def test_create_feedback_through_envoy_with_chat_frozen_is_answered_after_one_chat_timeout(
        database_url, tmp_path):
    procs = make_procs(database_url, tmp_path)
    envoy = None
    try:
        await procs.start("collector", OTEL_TRACES_EXPORTER="none")
        await procs.start("agent")
        chat_proc = await procs.start("chat")
        await procs.start("feedback")
        envoy_dir = tmp_path / "envoy"
        envoy = await asyncio.to_thread(start_envoy, GatewayPorts(
            gateway=0, chat=procs.ports["chat"], feedback=procs.ports["feedback"], traces=procs.ports["query"]),
            (ALLOWED_ORIGIN,), config_dir=envoy_dir)
        token = procs.md()[0][1].removeprefix("Bearer ")
        async with grpc.aio.insecure_channel(procs.target("chat")) as cch:
            chat = chat_pb2_grpc.ChatServiceStub(cch)
            inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
                instance=chat_pb2.Instance(display_name="k", agent="reference")), metadata=procs.md())
            turn = await chat.SendMessage(chat_pb2.SendMessageRequest(
                instance=inst.name, content="hello", request_id=str(uuid.uuid4())), metadata=procs.md())

        def report(body: str) -> pb.CreateFeedbackRequest:
            return pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body=body),
                                            request_id=str(uuid.uuid4()))

        async with httpx.AsyncClient(timeout=30) as client:
            ok = await call(client, envoy.url, FEEDBACK + "CreateFeedback", report("while chat answers"), token=token)
            assert ok.grpc_status == 0, (ok.grpc_status, ok.grpc_message)  # feedback's channel to chat is READY
            os.kill(chat_proc.pid, signal.SIGSTOP)
            try:
                for attempt in ("first", "second"):
                    before = await asyncio.to_thread(_retries, envoy_dir)
                    r = await call(client, envoy.url, FEEDBACK + "CreateFeedback", report("wrong"), token=token)
                    assert r.grpc_status == UNAVAILABLE, (attempt, r.grpc_status, r.grpc_message)
                    assert r.elapsed_s < CHAT_TIMEOUT_S + MARGIN_S, (attempt, r.elapsed_s)  # was 6.2 s: 3 × 2 s
                    assert await asyncio.to_thread(_retries, envoy_dir) == before, attempt
            finally:
                os.kill(chat_proc.pid, signal.SIGCONT)
            # Chat's process gone: feedback's UNAVAILABLE comes at once, and Envoy still retries it.
            procs.kill("chat")
            before = await asyncio.to_thread(_retries, envoy_dir)
            r = await call(client, envoy.url, FEEDBACK + "CreateFeedback", report("wrong"), token=token)
            assert r.grpc_status == UNAVAILABLE, (r.grpc_status, r.grpc_message)
            assert await asyncio.to_thread(_retries, envoy_dir) > before
    finally:
        if envoy is not None:
            await asyncio.to_thread(envoy.stop)
        await asyncio.to_thread(procs.stop_all)
