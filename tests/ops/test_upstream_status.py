"""Statuses from another service mapped by what they mean: a chat service that answers INTERNAL makes
the feedback service answer INTERNAL `CHAT_FAILED` (it was reachable: not `CHAT_UNAVAILABLE`, which
clients would retry), one that cannot be reached is UNAVAILABLE `CHAT_UNAVAILABLE` with RetryInfo, and
a chat service that runs but whose database does not answer (UNAVAILABLE `DATABASE_UNAVAILABLE`) makes
the feedback service name the database too (issue 25: it said `CHAT_UNAVAILABLE` during a frozen
PostgreSQL although chat was running)."""
from __future__ import annotations

import asyncio

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from agentfeedback.chat.v1 import chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.common.depfail import database_unavailable
from services.common.errors import error_info, internal_status, status_details, to_status
from tests.helpers.feedback import channel_to, expect_error, new_instance, rid, send, start_feedback


def _rate_and_report(stub, stack, inst: str, turn) -> dict:
    """The two writes that ask chat first, by method name: a rating of `turn`'s reply and a report on it."""
    return {
        "PutRating": stub.PutRating(pb.PutRatingRequest(rating=pb.Rating(
            conversation=inst, turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE,
            aspect="reaction", sentiment=pb.RATING_SENTIMENT_NEGATIVE), request_id=rid()), metadata=stack.md()),
        "CreateFeedback": stub.CreateFeedback(pb.CreateFeedbackRequest(
            feedback=pb.Feedback(message=turn.reply.name, body="wrong"), request_id=rid()), metadata=stack.md()),
    }


class _FailingChat(chat_pb2_grpc.ChatServiceServicer):
    """A real gRPC ChatService whose every call fails INTERNAL as our chat gateway answers a bug of its
    own (services.common.server: `internal_status`, ErrorInfo INTERNAL naming its trace id)."""

    async def _bug(self, context):
        await context.abort_with_status(rpc_status.to_status(internal_status("0af7651916cd43dd8448eb211c80319c")))

    async def GetInstance(self, request, context):
        await self._bug(context)

    async def GetMessage(self, request, context):
        await self._bug(context)

    async def ListMessages(self, request, context):
        await self._bug(context)


async def test_chat_internal_is_chat_failed_and_chat_unreachable_is_unavailable_with_retry_info(stack, tmp_path):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "rate me")
    broken = grpc.aio.server()
    chat_pb2_grpc.add_ChatServiceServicer_to_server(_FailingChat(), broken)
    port = broken.add_insecure_port("127.0.0.1:0")
    await broken.start()
    failing = await start_feedback(stack, tmp_path / "a", chat_target=f"127.0.0.1:{port}", chat_timeout_s=2)
    gone = await start_feedback(stack, tmp_path / "b", chat_target="127.0.0.1:1", chat_timeout_s=0.5)
    try:
        rating = pb.Rating(conversation=inst, turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE,
                           aspect="reaction", sentiment=pb.RATING_SENTIMENT_NEGATIVE)
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, failing.port))
        e = await expect_error(stub.PutRating(pb.PutRatingRequest(rating=rating, request_id=rid()), metadata=stack.md()),
                               grpc.StatusCode.INTERNAL)
        assert error_info(e).reason == "CHAT_FAILED"
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, gone.port))
        e = await expect_error(stub.PutRating(pb.PutRatingRequest(rating=rating, request_id=rid()), metadata=stack.md()),
                               grpc.StatusCode.UNAVAILABLE)
        assert error_info(e).reason == "CHAT_UNAVAILABLE"
        assert any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status_details(e))
    finally:
        await gone.stop(0.5)
        await failing.stop(0.5)
        await broken.stop(0)


class _DatabaseDownChat(chat_pb2_grpc.ChatServiceServicer):
    """A real gRPC ChatService answering every call as the chat gateway does when its PostgreSQL does not
    answer: UNAVAILABLE, ErrorInfo DATABASE_UNAVAILABLE (dependency postgresql), RetryInfo."""

    async def _down(self, context):
        await context.abort_with_status(rpc_status.to_status(to_status(database_unavailable())))

    async def GetInstance(self, request, context):
        await self._down(context)

    async def ListMessages(self, request, context):
        await self._down(context)


async def test_chat_whose_database_is_down_makes_feedback_name_the_database_not_chat(stack, tmp_path):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "rate me")
    chat = grpc.aio.server()
    chat_pb2_grpc.add_ChatServiceServicer_to_server(_DatabaseDownChat(), chat)
    port = chat.add_insecure_port("127.0.0.1:0")
    await chat.start()
    fb = await start_feedback(stack, tmp_path / "a", chat_target=f"127.0.0.1:{port}", chat_timeout_s=2)
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, fb.port))
        calls = _rate_and_report(stub, stack, inst, turn)
        for what, call in calls.items():
            e = await expect_error(call, grpc.StatusCode.UNAVAILABLE)
            info = error_info(e)
            assert (info.reason, info.metadata["dependency"], info.metadata["via"]) == (
                "DATABASE_UNAVAILABLE", "postgresql", "chat"), (what, info)
            assert "database" in e.details(), what
            assert any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status_details(e)), what
    finally:
        await fb.stop(0.5)
        await chat.stop(0)


async def test_a_bad_request_is_one_log_line_naming_method_code_and_reason_not_the_value(stack, caplog):
    import logging  # noqa: PLC0415

    caplog.set_level(logging.INFO, logger="services.common.server")
    secret = "do-not-echo-" + rid()
    await expect_error(stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=f"feedback/{secret}"),
                                                    metadata=stack.md()), grpc.StatusCode.NOT_FOUND)
    lines = [r for r in caplog.records if r.name == "services.common.server"]
    assert len(lines) == 1 and not lines[0].exc_info, [r.getMessage() for r in lines]
    assert lines[0].getMessage().startswith("/agentfeedback.feedback.v1.FeedbackService/GetFeedback: NOT_FOUND")
    assert secret not in lines[0].getMessage()


async def _reset_every_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A minimal HTTP/2 peer (RFC 9113) that answers each stream a client opens with RST_STREAM
    INTERNAL_ERROR (0x2): what a gRPC client sees when a server's stream breaks before its status (a
    replica stopping mid-call). gRPC's own client then makes up INTERNAL "Received RST_STREAM with
    error code 2", a status with no google.rpc.Status details."""
    try:
        await reader.readexactly(24)  # the client connection preface
        writer.write(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # our SETTINGS (none)
        while True:
            head = await reader.readexactly(9)
            length, kind, flags, stream = int.from_bytes(head[:3]), head[3], head[4], int.from_bytes(head[5:]) & 0x7FFFFFFF
            await reader.readexactly(length)
            if kind == 0x4 and not flags & 0x1:  # their SETTINGS: acknowledged
                writer.write(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
            elif kind == 0x6 and not flags & 0x1:  # PING: answered
                writer.write(b"\x00\x00\x08\x06\x01\x00\x00\x00\x00" + b"\x00" * 8)
            elif kind == 0x1:  # HEADERS opening a stream: reset it
                writer.write(b"\x00\x00\x04\x03\x00" + stream.to_bytes(4) + (2).to_bytes(4))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def test_chat_stream_broken_mid_call_is_chat_unavailable_with_retry_info_not_internal(stack, tmp_path):
    """A chat replica whose streams break before their status (it stopped mid-call: the multi-host
    rolling restart saw one CreateFeedback answer INTERNAL) got no answer from chat: the feedback
    service answers UNAVAILABLE CHAT_UNAVAILABLE with RetryInfo, which clients retry (with the same
    request id), not INTERNAL CHAT_FAILED, which they must not."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "rate me")
    peer = await asyncio.start_server(_reset_every_stream, "127.0.0.1", 0)
    port = peer.sockets[0].getsockname()[1]
    fb = await start_feedback(stack, tmp_path / "a", chat_target=f"127.0.0.1:{port}", chat_timeout_s=2)
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, fb.port))
        calls = _rate_and_report(stub, stack, inst, turn)
        for what, call in calls.items():
            e = await expect_error(call, grpc.StatusCode.UNAVAILABLE)
            assert error_info(e).reason == "CHAT_UNAVAILABLE", (what, error_info(e))
            assert any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status_details(e)), what
    finally:
        await fb.stop(0.5)
        peer.close()
