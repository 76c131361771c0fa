"""Bounded echoes and span hygiene (issue 16) over the real stack: a client value, however long, comes
back clipped with its real status, and cannot cost another request its spans."""
from __future__ import annotations

import uuid

import grpc
import pytest
from google.protobuf import field_mask_pb2

from agentfeedback.agent.v1 import agent_pb2, agent_pb2_grpc
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.errors import status_details
from google.rpc import error_details_pb2


def _traceparent() -> tuple[str, str]:
    trace_id = uuid.uuid4().hex
    return trace_id, f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"


async def _turn(stack) -> chat_pb2.SendMessageResponse:
    chat = stack.chat()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="resil", agent="reference")),
                                     metadata=stack.md())
    return await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="hello",
                                                              request_id=str(uuid.uuid4())), metadata=stack.md())


async def test_a_7000_char_update_mask_is_invalid_argument_clipped_and_a_good_report_keeps_its_span(stack):
    turn = await _turn(stack)
    fb = stack.feedback()
    path = "x" * 7000
    bad = pb.PutRatingRequest(rating=pb.Rating(conversation=turn.reply.name.split("/messages/")[0],
                                               turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE,
                                               aspect="reaction", sentiment=pb.RATING_SENTIMENT_POSITIVE),
                              update_mask=field_mask_pb2.FieldMask(paths=[path]), request_id=str(uuid.uuid4()))
    try:
        await fb.PutRating(bad, metadata=stack.md())
        raise AssertionError("PutRating with a 7,000-character mask path succeeded")
    except grpc.aio.AioRpcError as e:
        # Was RESOURCE_EXHAUSTED "received metadata size exceeds hard limit": the path echoed twice.
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details()[:200])
        assert "…(+" in e.details() and len(e.details()) < 1100
        assert "is not a rating field" in e.details()  # clipped where it is echoed: the sentence stays whole
        violations = [d for d in status_details(e) if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)]
        br = error_details_pb2.BadRequest()
        violations[0].Unpack(br)
        assert br.field_violations[0].field == "update_mask"
        assert len(br.field_violations[0].description) < 1100
    trace_id, tp = _traceparent()
    good = await fb.CreateFeedback(
        pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="wrong answer"),
                                 request_id=str(uuid.uuid4())),
        metadata=stack.md() + (("traceparent", tp),))
    assert good.name
    got = await stack.wait_trace(trace_id)
    assert any(s.name.endswith("CreateFeedback") or s.name == "feedback.create" for s in got.spans)


async def test_oversized_client_values_in_one_batch_do_not_cost_another_request_its_span(stack):
    """Two Think calls carrying a 2.3 MB `instance` plus a normal one, exported in one batch: before the
    span limits, the batch (> 4 MiB) was refused by the collector and the normal span was lost. (The
    agent refuses the huge instance, INVALID_ARGUMENT, and records the refused turn's span.)"""
    agent = agent_pb2_grpc.AgentServiceStub(stack.channel("agent"))
    huge = "instances/" + "i" * 2_300_000
    bad_traces = []
    for _ in range(2):
        bad_trace, tp = _traceparent()
        bad_traces.append(bad_trace)
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await agent.Think(agent_pb2.ThinkRequest(instance=huge, content="hello", turn_index=0),
                              metadata=stack.md() + (("traceparent", tp),))
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    trace_id, tp = _traceparent()
    await agent.Think(agent_pb2.ThinkRequest(instance="instances/normal", content="hello", turn_index=0),
                      metadata=stack.md() + (("traceparent", tp),))
    got = await stack.wait_trace(trace_id)
    assert any(s.name == "agent.think" for s in got.spans)
    # The oversized spans arrived too, their value clipped with a visible marker.
    for bad_trace in bad_traces:
        (think,) = [sp for sp in (await stack.wait_trace(bad_trace)).spans if sp.name == "agent.think"]
        value = think.attributes["chat.instance"]
        assert len(value) < 300 and value.endswith(f"…(+{len(huge) - 200} chars)")


async def test_a_stale_etag_on_a_large_report_is_aborted_not_a_metadata_overflow(stack):
    """ABORTED carries the current report in its details; a 16 KB body made the trailers overflow and
    the client saw RESOURCE_EXHAUSTED instead of ABORTED."""
    turn = await _turn(stack)
    fb = stack.feedback()
    report = await fb.CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=turn.reply.name, body="\U0001F600" * 4000), request_id=str(uuid.uuid4())),
        metadata=stack.md())
    await fb.UpdateFeedback(pb.UpdateFeedbackRequest(feedback=pb.Feedback(name=report.name, status=pb.STATUS_TRIAGED),
                                                     update_mask=field_mask_pb2.FieldMask(paths=["status"])),
                            metadata=stack.md())  # the etag read at create is stale now
    stale = pb.UpdateFeedbackRequest(feedback=pb.Feedback(name=report.name, status=pb.STATUS_OPEN, etag=report.etag),
                                     update_mask=field_mask_pb2.FieldMask(paths=["status"]),
                                     request_id=str(uuid.uuid4()))
    try:
        await fb.UpdateFeedback(stale, metadata=stack.md())
        raise AssertionError("a stale etag was accepted")
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.ABORTED, (e.code(), e.details()[:200])
