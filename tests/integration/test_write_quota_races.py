"""The stored-report cap and the write quota under concurrency and retries, over the real stack:
creates of one owner arriving at once never store more than `max_reports_per_owner`; concurrent
duplicates of one request id at the cap all get the one stored report (or, when another report took
the last place first, all the same refusal); a retry of an acknowledged write gets its answer even
when the owner is over the write quota."""
from __future__ import annotations

import asyncio
import random
import uuid

import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.errors import error_info, status_details
from tests.stack import start_stack


def _rid() -> str:
    return str(uuid.uuid4())


async def _reply(s, sub: str) -> str:
    inst = (await s.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="q", agent="reference")), metadata=s.md(sub))).name
    sent = await s.chat().SendMessage(chat_pb2.SendMessageRequest(instance=inst, content="hello", request_id=_rid()),
                                      metadata=s.md(sub))
    return sent.reply.name


def _create_request(message: str, request_id: str | None = None) -> pb.CreateFeedbackRequest:
    return pb.CreateFeedbackRequest(feedback=pb.Feedback(message=message, body="wrong"), request_id=request_id or _rid())


async def _outcome(call) -> str:
    """The report's name, or the error's reason (what a client would branch on)."""
    try:
        return (await call).name
    except grpc.aio.AioRpcError as e:
        return f"{e.code().name}:{error_info(e).reason}"


async def _stored(s, sub: str) -> list[str]:
    got = await s.feedback().ListFeedback(pb.ListFeedbackRequest(page_size=100), metadata=s.md(sub))
    return [f.name for f in got.feedback]


@pytest.fixture
async def capped(database_url, tmp_path):
    """The stack with a cap of 3 stored reports per owner, under the default write quota (240 a minute:
    every create of these owners is near the cap)."""
    s = await start_stack(database_url, tmp_path, feedback={"max_reports_per_owner": 3})
    yield s  # pytest runs the rest as teardown, whatever the test did
    await s.stop()


async def test_concurrent_distinct_creates_of_one_owner_never_exceed_the_cap(capped):
    s = capped
    reply = await _reply(s, "erin")
    fb = s.feedback()
    got = await asyncio.gather(*(_outcome(fb.CreateFeedback(_create_request(reply), metadata=s.md("erin")))
                                 for _ in range(6)))
    accepted = [g for g in got if g.startswith("feedback/")]
    assert len(accepted) == 3, got
    assert sorted(g for g in got if g not in accepted) == ["RESOURCE_EXHAUSTED:STORED_REPORTS_EXCEEDED"] * 3
    assert sorted(await _stored(s, "erin")) == sorted(accepted)


async def test_concurrent_duplicates_at_the_cap_all_get_the_one_stored_report(capped):
    """Each round: the owner has cap − 1 reports; four copies of one request and one other request
    arrive within 30 ms of each other (random, so the rounds cover many interleavings of counts and
    commits). Either the request got the last place (every copy answers with its one report) or the
    other one did (every copy is refused alike); never a mix, never a fourth report. (Before the
    owner's lock: a fourth report in about 4 rounds of 10, a mix in about 1 of 30.)"""
    s = capped
    reply = await _reply(s, "fred")
    fb, md = s.feedback(), s.md("fred")
    keep = [(await fb.CreateFeedback(_create_request(reply), metadata=md)).name for _ in range(2)]
    rng = random.Random(7)

    async def arriving(request: pb.CreateFeedbackRequest) -> str:
        await asyncio.sleep(rng.uniform(0, 0.03))
        return await _outcome(fb.CreateFeedback(request, metadata=md))

    for _ in range(30):
        dup = _create_request(reply)
        got = await asyncio.gather(*(arriving(dup) for _ in range(4)), arriving(_create_request(reply)))
        copies, other = got[:4], got[4]
        assert len(set(copies)) == 1, got
        stored = await _stored(s, "fred")
        assert len(stored) == 3, (got, stored)
        if copies[0].startswith("feedback/"):
            assert other == "RESOURCE_EXHAUSTED:STORED_REPORTS_EXCEEDED" and copies[0] in stored
        else:
            assert copies[0] == "RESOURCE_EXHAUSTED:STORED_REPORTS_EXCEEDED" and other in stored
        # A later retry of the request agrees with what its copies were told.
        assert await _outcome(fb.CreateFeedback(dup, metadata=md)) == copies[0]
        for name in stored:
            if name not in keep:
                await fb.DeleteFeedback(pb.DeleteFeedbackRequest(name=name, request_id=_rid()), metadata=md)


async def test_retries_of_acknowledged_writes_get_their_answer_over_the_write_quota(database_url, tmp_path):
    s = await start_stack(database_url, tmp_path, feedback={"write_quota_per_minute": 4, "filing_capture_wait_s": 0})
    try:
        reply = await _reply(s, "gina")
        fb, md = s.feedback(), s.md("gina")
        create = _create_request(reply)
        created = await fb.CreateFeedback(create, metadata=md)
        update = pb.UpdateFeedbackRequest(feedback=pb.Feedback(name=created.name, status=pb.STATUS_TRIAGED),
                                          update_mask=field_mask_pb2.FieldMask(paths=["status"]), request_id=_rid())
        updated = await fb.UpdateFeedback(update, metadata=md)
        inst = reply.rsplit("/messages/", 1)[0]
        put = pb.PutRatingRequest(rating=pb.Rating(conversation=inst, turn_index=0, scope=pb.RATING_SCOPE_MESSAGE,
                                                   aspect="reaction", sentiment=pb.RATING_SENTIMENT_NEGATIVE),
                                  request_id=_rid())
        rating = await fb.PutRating(put, metadata=md)
        filed = await fb.FileFeedback(pb.FileFeedbackRequest(name=created.name, request_id=_rid()), metadata=md)
        # The quota (4 writes a minute) is spent: a new write is refused, with its QuotaFailure.
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await fb.CreateFeedback(_create_request(reply), metadata=md)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_info(ei.value).reason == "WRITE_QUOTA_EXCEEDED"
        failures = [d for d in status_details(ei.value) if d.Is(error_details_pb2.QuotaFailure.DESCRIPTOR)]
        assert len(failures) == 1
        # Retries of what was acknowledged (a client that lost the responses) get their answers.
        assert (await fb.CreateFeedback(create, metadata=md)).name == created.name
        assert (await fb.PutRating(put, metadata=md)).name == rating.name
        again = await fb.UpdateFeedback(update, metadata=md)
        assert again.name == updated.name and again.issue_url == filed.issue_url  # the report as it is now
        assert (await fb.FileFeedback(pb.FileFeedbackRequest(name=created.name), metadata=md)).issue_url \
            == filed.issue_url
        # Nothing new was stored; a request id reused for other content is told so, and stores nothing.
        assert await _stored(s, "gina") == [created.name]
        other = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=reply, body="other words"),
                                         request_id=create.request_id)
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await fb.CreateFeedback(other, metadata=md)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(ei.value).reason == "REQUEST_ID_REUSED"
        assert await _stored(s, "gina") == [created.name]
    finally:
        await s.stop()


async def test_chat_retries_of_acknowledged_writes_get_their_answer_over_the_write_quota(database_url, tmp_path):
    s = await start_stack(database_url, tmp_path, chat={"write_quota_per_minute": 4})
    try:
        chat, md = s.chat(), s.md("hana")
        create = chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="q", agent="reference"),
                                                request_id=_rid())
        inst = await chat.CreateInstance(create, metadata=md)
        send = chat_pb2.SendMessageRequest(instance=inst.name, content="hello", request_id=_rid())
        sent = await chat.SendMessage(send, metadata=md)
        fork = chat_pb2.ForkConversationRequest(parent=inst.name, turn_index=sent.reply.turn_index,
                                                display_name="f", request_id=_rid())
        forked = await chat.ForkConversation(fork, metadata=md)
        await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="again", request_id=_rid()),
                               metadata=md)
        with pytest.raises(grpc.aio.AioRpcError) as ei:  # the quota (4 writes a minute) is spent
            await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="more", request_id=_rid()),
                                   metadata=md)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_info(ei.value).reason == "WRITE_QUOTA_EXCEEDED"
        assert (await chat.CreateInstance(create, metadata=md)).name == inst.name
        again = await chat.SendMessage(send, metadata=md)
        assert (again.reply.name, again.reply.content) == (sent.reply.name, sent.reply.content)
        streamed = [ev async for ev in chat.StreamMessage(send, metadata=md)]
        assert any(ev.HasField("reply") and ev.reply.name == sent.reply.name for ev in streamed)
        assert (await chat.ForkConversation(fork, metadata=md)).instance.name == forked.instance.name
        msgs = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst.name), metadata=md)
        assert [m.content for m in msgs.messages if m.role == chat_pb2.ROLE_USER] == ["hello", "again"]
    finally:
        await s.stop()
