"""Retries complete (issue 16): a SendMessage that failed with a retryable status, retried with the same
request id, calls the agent again and reuses the stored user message (never stored twice)."""
from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from services.common.errors import error_info


async def _restart_agent(stack) -> None:
    from services.chat.agent.server import create_server as create_agent  # noqa: PLC0415
    from services.chat.agent.settings import AgentSettings  # noqa: PLC0415
    from tests.stack import TEST_JWT_SECRET  # noqa: PLC0415

    settings = AgentSettings(listen=f"127.0.0.1:{stack.ports['agent']}",
                             feedback_target=f"127.0.0.1:{stack.ports['feedback']}", think_ms=0,
                             jwt_secret=TEST_JWT_SECRET, data_dir=stack.data_dir, shutdown_grace_s=0.5,
                             shutdown_drain_s=0)
    stack.servers["agent"] = await create_agent(settings, tracer_provider=stack.providers["agent"])


async def test_a_turn_that_failed_unavailable_completes_on_retry_with_the_same_request_id(stack):
    chat = stack.chat()
    inst = (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="r", agent="reference")), metadata=stack.md())).name
    await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content="first", request_id=str(uuid.uuid4())),
                           metadata=stack.md())
    await stack.servers.pop("agent").stop(0)
    req = chat_pb2.SendMessageRequest(instance=inst, content="are you there?", request_id=str(uuid.uuid4()))
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await chat.SendMessage(req, metadata=stack.md(), timeout=10)
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    failed = error_info(ei.value).metadata
    # While the agent is still down, the retry runs again (and fails again the same way).
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await chat.SendMessage(req, metadata=stack.md(), timeout=10)
    assert again.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(again.value).metadata["user_message"] == failed["user_message"]
    failed_traces = {failed["trace_id"], error_info(again.value).metadata["trace_id"]}

    await _restart_agent(stack)
    # A correct client: the same request again after RetryInfo's delay (the gateway's channel to the
    # agent reconnects within its backoff).
    for _ in range(20):
        try:
            done = await chat.SendMessage(req, metadata=stack.md(), timeout=10)
            break
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE
            failed_traces.add(error_info(e).metadata["trace_id"])
            await asyncio.sleep(0.5)
    else:
        raise AssertionError("the retry with the same request id never completed (the failure replayed)")
    assert done.user_message.name == failed["user_message"]
    assert done.reply.content and done.trace_id != failed["trace_id"]
    # A further retry replays the completed turn.
    replay = await chat.SendMessage(req, metadata=stack.md(), timeout=10)
    assert replay.reply.name == done.reply.name
    msgs = (await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst), metadata=stack.md())).messages
    users = [m for m in msgs if m.role == chat_pb2.ROLE_USER]
    assert [m.content for m in users] == ["first", "are you there?"]  # stored once
    assert [m.trace_id for m in msgs if m.content == "are you there?" or m.name == done.reply.name] == \
        [done.trace_id, done.trace_id]
    t = await stack.wait_trace(done.trace_id, min_spans=2)
    (turn,) = [s for s in t.spans if s.name == "chat.turn"]
    # Each attempt has its own trace; the completed one names the attempt it retried.
    assert turn.attributes["chat.retry_of_trace"] in failed_traces and len(failed_traces) >= 2


class _FlakyChat(chat_pb2_grpc.ChatServiceServicer):
    """Stand-in ChatService (a real grpc.aio server on loopback) whose first calls answer UNAVAILABLE:
    the only way to make a live server fail exactly once on demand."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls: dict[str, int] = {}

    async def _maybe_fail(self, name: str, context) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.calls[name] <= self.failures:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")

    async def GetMessage(self, request, context):  # noqa: N802
        await self._maybe_fail("GetMessage", context)
        return chat_pb2.Message(name=request.name, content="here")

    async def SendMessage(self, request, context):  # noqa: N802
        await self._maybe_fail("SendMessage", context)
        return chat_pb2.SendMessageResponse()


@pytest.mark.parametrize("make_channel", ["service", "cli"])
async def test_channels_retry_safe_calls_on_unavailable_with_grpcs_policy_and_never_send_message(make_channel):
    from services.cli.client import Clients, ClientSettings  # noqa: PLC0415
    from services.common.server import client_channel  # noqa: PLC0415

    flaky = _FlakyChat(failures=2)
    server = grpc.aio.server()
    chat_pb2_grpc.add_ChatServiceServicer_to_server(flaky, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    clients = None
    try:
        target = f"127.0.0.1:{port}"
        if make_channel == "service":
            ch = client_channel(target)
            stub = chat_pb2_grpc.ChatServiceStub(ch)
        else:
            clients = Clients(settings=ClientSettings(chat_target=target), token="t")
            stub = clients.chat()
        got = await stub.GetMessage(chat_pb2.GetMessageRequest(name="instances/a/messages/b"), timeout=10)
        assert got.content == "here" and flaky.calls["GetMessage"] == 3
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await stub.SendMessage(chat_pb2.SendMessageRequest(instance="instances/a", content="hi"), timeout=10)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE and flaky.calls["SendMessage"] == 1
        if make_channel == "service":
            await ch.close()
    finally:
        if clients is not None:
            await clients.close()
        await server.stop(0)
