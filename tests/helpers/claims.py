"""Helpers of the review-claim integration tests (tests/integration/test_feedback_claims*.py): a report on
a real turn, ClaimFeedback / ReleaseFeedback calls, the report's audit actions oldest first."""
from __future__ import annotations

import uuid

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf import duration_pb2

from services.common.auth import SCOPE_FEEDBACK_ADMIN
from tests.stack import Stack, all_pages


async def reported(stack: Stack, sub: str = "alice") -> pb.Feedback:
    """A report by `sub` on the reply of a fresh one-turn conversation."""
    inst = await stack.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Agent", agent="reference"), request_id=str(uuid.uuid4())),
        metadata=stack.md(sub))
    t = await stack.chat().SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="what is 2+2?",
                                                                   request_id=str(uuid.uuid4())), metadata=stack.md(sub))
    return await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=t.reply.name, body="wrong sum"), request_id=str(uuid.uuid4())),
        metadata=stack.md(sub))


def claim(stack: Stack, name: str, session: str, ttl_s: float | None = None, sub: str = "alice", md=None):
    """The ClaimFeedback call (an awaitable) for `session`, with a lease of `ttl_s` seconds when given."""
    ttl = duration_pb2.Duration(seconds=int(ttl_s), nanos=int((ttl_s % 1) * 1e9)) if ttl_s is not None else None
    return stack.feedback().ClaimFeedback(pb.ClaimFeedbackRequest(name=name, session=session, ttl=ttl),
                                          metadata=md or stack.md(sub))


def release(stack: Stack, name: str, session: str, sub: str = "alice"):
    """The ReleaseFeedback call (an awaitable) for `session`."""
    return stack.feedback().ReleaseFeedback(pb.ReleaseFeedbackRequest(name=name, session=session),
                                            metadata=stack.md(sub))


async def audit_actions(stack: Stack, name: str) -> list[int]:
    """The report's audit actions, oldest first (read by an admin)."""
    records = await all_pages(stack.feedback().ListAuditRecords, pb.ListAuditRecordsRequest(feedback=name),
                              "audit_records", stack.md("ops", (SCOPE_FEEDBACK_ADMIN,)))
    return [r.action for r in reversed(records)]
