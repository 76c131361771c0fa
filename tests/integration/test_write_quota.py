"""Per-owner write quotas (issue 16) over the real stack: over the limit RESOURCE_EXHAUSTED with RetryInfo
and QuotaFailure and nothing stored; other owners unaffected; the count is shared by replicas."""
from __future__ import annotations

import time
import uuid

import grpc
import pytest
from google.rpc import error_details_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.common.errors import error_info, status_details
from services.common.quota import MIN_RETRY_AFTER_S, REFUSAL_DELAY_S
from tests.stack import TEST_JWT_SECRET, start_stack


def _detail(e: grpc.aio.AioRpcError, cls):
    for d in status_details(e):
        if d.Is(cls.DESCRIPTOR):
            out = cls()
            d.Unpack(out)
            return out
    return None


async def _instance(s, sub: str) -> str:
    return (await s.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="q", agent="reference")), metadata=s.md(sub))).name


async def _send(s, inst: str, sub: str) -> chat_pb2.SendMessageResponse:
    return await s.chat().SendMessage(chat_pb2.SendMessageRequest(instance=inst, content="hello",
                                                                  request_id=str(uuid.uuid4())), metadata=s.md(sub))


def _create(stub, message: str, md):
    return stub.CreateFeedback(pb.CreateFeedbackRequest(feedback=pb.Feedback(message=message, body="wrong"),
                                                        request_id=str(uuid.uuid4())), metadata=md)


async def _count(s, sub: str) -> int:
    return len((await s.feedback().ListFeedback(pb.ListFeedbackRequest(page_size=100), metadata=s.md(sub))).feedback)


@pytest.fixture
async def small_quota(database_url, tmp_path):
    s = await start_stack(database_url, tmp_path, feedback={"write_quota_per_minute": 4},
                          chat={"write_quota_per_minute": 3})
    try:
        yield s
    finally:
        await s.stop()


async def test_over_the_write_quota_is_resource_exhausted_with_retry_info_and_nothing_is_stored(small_quota):
    s = small_quota
    inst = await _instance(s, "alice")
    reply = (await _send(s, inst, "alice")).reply.name
    fb = s.feedback()
    for _ in range(4):
        await _create(fb, reply, s.md("alice"))
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await _create(fb, reply, s.md("alice"))
    e = ei.value
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(e).reason == "WRITE_QUOTA_EXCEEDED"
    retry = _detail(e, error_details_pb2.RetryInfo)
    assert 0 < retry.retry_delay.ToMilliseconds() <= 60_000
    qf = _detail(e, error_details_pb2.QuotaFailure)
    assert qf.violations[0].subject == "owner:alice" and "4 writes per 60 s" in qf.violations[0].description
    assert await _count(s, "alice") == 4
    # Another owner is not affected by alice's flood.
    bob_inst = await _instance(s, "bob")
    bob_reply = (await _send(s, bob_inst, "bob")).reply.name
    assert (await _create(fb, bob_reply, s.md("bob"))).name


async def test_send_message_over_the_quota_stores_no_user_message(small_quota):
    s = small_quota
    inst = await _instance(s, "carol")
    await _send(s, inst, "carol")
    await _send(s, inst, "carol")
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await _send(s, inst, "carol")
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    msgs = await s.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst), metadata=s.md("carol"))
    assert sum(1 for m in msgs.messages if m.role == chat_pb2.ROLE_USER) == 2


async def test_the_quota_holds_across_two_replicas_of_the_feedback_service(small_quota, tmp_path):
    from services.feedback.server import create_server  # noqa: PLC0415
    from services.feedback.settings import FeedbackSettings  # noqa: PLC0415

    s = small_quota
    inst = await _instance(s, "dave")
    reply = (await _send(s, inst, "dave")).reply.name
    settings = FeedbackSettings(listen="127.0.0.1:0", chat_target=f"127.0.0.1:{s.ports['chat']}",
                                traces_target=f"127.0.0.1:{s.ports['query']}", jwt_secret=TEST_JWT_SECRET,
                                data_dir=tmp_path, write_quota_per_minute=4,
                                tracker_markdown_dir=str(tmp_path / "t2"), shutdown_grace_s=0.5, shutdown_drain_s=0)
    replica = await create_server(settings, database_url=s.database_url, run_worker=False)
    try:
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{replica.port}")
        other = feedback_pb2_grpc.FeedbackServiceStub(ch)
        for stub in (s.feedback(), other, s.feedback(), other):
            await _create(stub, reply, s.md("dave"))
        for stub in (s.feedback(), other):
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await _create(stub, reply, s.md("dave"))
            assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await ch.close()
    finally:
        await replica.stop(0.5)
    assert await _count(s, "dave") == 4


async def test_the_cap_on_stored_reports_refuses_a_create_until_one_is_deleted(database_url, tmp_path):
    s = await start_stack(database_url, tmp_path, feedback={"max_reports_per_owner": 2})
    try:
        inst = await _instance(s, "erin")
        reply = (await _send(s, inst, "erin")).reply.name
        fb = s.feedback()
        first = await _create(fb, reply, s.md("erin"))
        second = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=reply, body="wrong"), request_id=str(uuid.uuid4()))
        stored = await fb.CreateFeedback(second, metadata=s.md("erin"))
        # At the cap, a retry of a create that succeeded still gets its report (nothing new is stored).
        assert (await fb.CreateFeedback(second, metadata=s.md("erin"))).name == stored.name
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await _create(fb, reply, s.md("erin"))
        e = ei.value
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and error_info(e).reason == "STORED_REPORTS_EXCEEDED"
        assert _detail(e, error_details_pb2.QuotaFailure).violations[0].subject == "owner:erin"
        assert _detail(e, error_details_pb2.RetryInfo) is None
        # The refusal names the cap and what helps, not the write quota (waiting does not help).
        assert "cap of 2 stored reports" in e.details() and "quota exceeded" not in e.details()
        await fb.DeleteFeedback(pb.DeleteFeedbackRequest(name=first.name, request_id=str(uuid.uuid4())),
                                metadata=s.md("erin"))
        assert (await _create(fb, reply, s.md("erin"))).name
    finally:
        await s.stop()


async def test_an_invalid_write_is_told_what_is_wrong_and_spends_no_token_of_the_write_quota(small_quota):
    """A request its own parse refuses is INVALID_ARGUMENT before the quota is asked (docs/choices.md
    "Quotas"): after a burst of bad calls the owner's writes still fit, and an owner over the quota is
    still told what is wrong with a bad call; valid writes over it stay RESOURCE_EXHAUSTED."""
    s = small_quota
    reply = (await _send(s, await _instance(s, "gina"), "gina")).reply.name
    fb = s.feedback()
    invalid = [pb.CreateFeedbackRequest(feedback=pb.Feedback(message=reply, body="x" * 10**6), request_id=str(uuid.uuid4())),
               pb.CreateFeedbackRequest(feedback=pb.Feedback(message=reply, body="no request id")),
               pb.PutRatingRequest(rating=pb.Rating(conversation="not a name"), request_id=str(uuid.uuid4())),
               pb.FileFeedbackRequest(name="feedback/"), pb.CopyRatingsRequest(source_conversation="x")]
    for _ in range(2):
        for request in invalid:
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await getattr(fb, type(request).__name__.removesuffix("Request"))(request, metadata=s.md("gina"))
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value.details()
            assert error_info(ei.value).metadata.get("field")
    # The 10 refused calls spent nothing: the quota's 4 writes are all there.
    for _ in range(4):
        assert (await _create(fb, reply, s.md("gina"))).name
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await _create(fb, reply, s.md("gina"))
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(ei.value).reason == "WRITE_QUOTA_EXCEEDED" and _detail(ei.value, error_details_pb2.QuotaFailure)
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await fb.CreateFeedback(invalid[0], metadata=s.md("gina"))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and error_info(ei.value).metadata["field"] == "feedback.body"
    assert await _count(s, "gina") == 4


async def test_an_invalid_chat_write_is_told_what_is_wrong_and_spends_no_token_of_the_write_quota(small_quota):
    """The same rule on the chat service (quota 3 a minute here): bad turns, instances and forks are
    INVALID_ARGUMENT naming the field, the owner's 3 writes are still there, the 4th is refused."""
    s = small_quota
    chat, md = s.chat(), s.md("hana")
    inst = await _instance(s, "hana")  # write 1 of 3
    invalid = [
        chat_pb2.SendMessageRequest(instance=inst, content="x" * 40_000),
        chat_pb2.SendMessageRequest(instance=inst, content="   "),
        chat_pb2.SendMessageRequest(instance="not a name", content="hello"),
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="q", agent="Not A Slug")),
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="a\u202eb")),
        chat_pb2.ForkConversationRequest(parent=inst, turn_index=-1),
    ]
    for _ in range(2):
        for request in invalid:
            method = {"SendMessageRequest": chat.SendMessage, "CreateInstanceRequest": chat.CreateInstance,
                      "ForkConversationRequest": chat.ForkConversation}[type(request).__name__]
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await method(request, metadata=md)
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value.details()
            assert error_info(ei.value).metadata.get("field")
        call = chat.StreamMessage(chat_pb2.SendMessageRequest(instance=inst, content=""), metadata=md)
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await call.read()
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # The 14 refused calls spent nothing: writes 2 and 3 fit, the 4th is over the quota.
    for _ in range(2):
        assert (await _send(s, inst, "hana")).reply.content
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await _send(s, inst, "hana")
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(ei.value).reason == "WRITE_QUOTA_EXCEEDED" and _detail(ei.value, error_details_pb2.QuotaFailure)


async def test_a_client_retrying_at_once_is_answered_once_a_second_and_told_what_is_left(database_url, tmp_path):
    """At 240 a minute the next write fits 0.25 s after a refusal; a refused write is still answered
    only after 1 s (REFUSAL_DELAY_S), its RetryInfo counting from the answer (issue 25: answered after
    RetryInfo's 0.25 s, a flooder's 8 clients sent ≈ 30 refused calls a second instead of 8)."""
    s = await start_stack(database_url, tmp_path, feedback={"write_quota_per_minute": 240, "write_quota_burst": 1})
    try:
        inst = await _instance(s, "alice")
        reply = (await _send(s, inst, "alice")).reply.name
        fb = s.feedback()
        await _create(fb, reply, s.md("alice"))
        t0 = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await _create(fb, reply, s.md("alice"))
        took = time.monotonic() - t0
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert took >= REFUSAL_DELAY_S - 0.05, round(took, 3)
        retry = _detail(ei.value, error_details_pb2.RetryInfo).retry_delay.ToMilliseconds()
        assert 0 < retry <= MIN_RETRY_AFTER_S * 1000 + 1, retry  # the 0.25 s passed during the hold
        assert (await _create(fb, reply, s.md("alice"))).name  # and the next write fits at once
    finally:
        await s.stop()
