"""Responses fit everywhere (issue 16): ListInstances, ListSuspectedDefects (chat), ListAuditRecords
(feedback) and SearchTraces (collector) end a page early with a next-page token once it would pass the
response size bound (services.common.pages.fit), like ListFeedback / ListMessages do.

Reaching the real 3 MiB bound with these small items would take tens of thousands of them, so the bound
is lowered for the test (the services run in this process): every item then passes it alone, and each
page must carry exactly one item, the rest reachable through the tokens, none twice, none lost.
"""
from __future__ import annotations

import time
import uuid

import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.traces.v1 import traces_pb2
from google.protobuf import field_mask_pb2, timestamp_pb2

from services.common import pages
from services.common.auth import SCOPE_FEEDBACK_ADMIN
from tests.stack import Stack, new_conversation

TRUNCATING = "how many agents do you have in total? Give me their names."  # a suspected defect per turn


async def pages_of(rpc, request, items: str, md) -> list[list[str]]:
    """Every page of a List call at page_size 100, as lists of item keys (name or trace_id)."""
    out: list[list[str]] = []
    while True:
        page = await rpc(request, metadata=md)
        out.append([getattr(i, "name", "") or i.trace_id for i in getattr(page, items)])
        if not page.next_page_token:
            return out
        request.page_token = page.next_page_token


def one_per_page(got: list[list[str]], expected: int) -> None:
    flat = [k for p in got for k in p]
    assert len(flat) == len(set(flat)) == expected  # nothing lost, nothing twice
    assert [len(p) for p in got] == [1] * expected  # was one page of all of them, past the bound


@pytest.fixture
def small_bound(monkeypatch):
    monkeypatch.setattr(pages, "RESPONSE_MAX_BYTES", 1)


async def test_chat_lists_end_pages_at_the_response_bound(stack: Stack, small_bound):
    chat = stack.chat()
    inst = None
    for _ in range(3):
        inst, _ = await new_conversation(stack, turns=0)
    one_per_page(await pages_of(chat.ListInstances, chat_pb2.ListInstancesRequest(page_size=100),
                                "instances", stack.md()), 3)
    for _ in range(3):
        await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content=TRUNCATING,
                                                           request_id=str(uuid.uuid4())), metadata=stack.md())
    one_per_page(await pages_of(chat.ListSuspectedDefects,
                                chat_pb2.ListSuspectedDefectsRequest(parent=inst, page_size=100),
                                "suspected_defects", stack.md()), 3)


async def test_audit_records_and_trace_search_end_pages_at_the_response_bound(stack: Stack, small_bound):
    _, sent = await new_conversation(stack, turns=3)
    fb = await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=sent[0].reply.name, body="wrong"), request_id=str(uuid.uuid4())),
        metadata=stack.md())
    for status in (pb.STATUS_TRIAGED, pb.STATUS_OPEN, pb.STATUS_TRIAGED):
        fb = await stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
            feedback=pb.Feedback(name=fb.name, status=status), update_mask=field_mask_pb2.FieldMask(paths=["status"]),
            request_id=str(uuid.uuid4())), metadata=stack.md())
    admin = stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
    got = await pages_of(stack.feedback().ListAuditRecords,
                         pb.ListAuditRecordsRequest(feedback=fb.name, page_size=100), "audit_records", admin)
    one_per_page(got, 3)

    for s in sent:
        await stack.wait_trace(s.trace_id)
    since, now = timestamp_pb2.Timestamp(seconds=int(time.time()) - 600), timestamp_pb2.Timestamp(seconds=int(time.time()) + 60)
    got = await pages_of(stack.traces().SearchTraces, traces_pb2.SearchTracesRequest(
        page_size=100, span_name="chat.turn", start_time=since, end_time=now), "traces", stack.md())
    assert {s.trace_id for s in sent} <= {k for p in got for k in p}
    one_per_page(got, sum(len(p) for p in got))
