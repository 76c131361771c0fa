"""Review claims are enforced by triage (issue 28) against the real service and PostgreSQL: while one
review session holds a report's claim, UpdateFeedback and FileFeedback from anyone else (another `sub`,
another session, or no session: the CLI, MCP) are FAILED_PRECONDITION FEEDBACK_CLAIMED naming the holder and
the expiry, and nothing is written, filed or audited; the holder's session triages and files; once the
claim expires or is released anyone may; a claim taken while an update waits is honoured."""
from __future__ import annotations

import asyncio
import time
import uuid

import grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf import field_mask_pb2

from services.common.errors import error_info
from tests.helpers.claims import audit_actions, claim, release, reported
from tests.helpers.feedback import expect_error
from tests.stack import Stack


def update(stack: Stack, fb: pb.Feedback, status: int, session: str = "", sub: str = "alice"):
    return stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=status, etag=fb.etag),
        update_mask=field_mask_pb2.FieldMask(paths=["status"]), request_id=str(uuid.uuid4()),
        review_session=session), metadata=stack.md(sub))


def file(stack: Stack, fb: pb.Feedback, session: str = "", sub: str = "alice"):
    return stack.feedback().FileFeedback(pb.FileFeedbackRequest(
        name=fb.name, request_id=str(uuid.uuid4()), review_session=session), metadata=stack.md(sub))


async def refused_as_claimed(call, held: pb.Feedback) -> None:
    e = await expect_error(call, grpc.StatusCode.FAILED_PRECONDITION)
    info = error_info(e)
    assert info.reason == "FEEDBACK_CLAIMED", info
    assert info.metadata["claimant"] == held.claim.claimant
    assert info.metadata["expire_time"].startswith(held.claim.expire_time.ToJsonString()[:19])
    assert held.claim.claimant in e.details() and "until" in e.details()


async def test_only_the_holding_session_triages_and_files_a_claimed_report(stack: Stack):
    fb = await reported(stack)
    held = await claim(stack, fb.name, "tab-a", 120)
    # Another session of the same sub, a caller without a session (CLI, MCP): refused, nothing written.
    await refused_as_claimed(update(stack, held, pb.STATUS_TRIAGED, "tab-b"), held)
    await refused_as_claimed(update(stack, held, pb.STATUS_TRIAGED), held)
    await refused_as_claimed(file(stack, held, "tab-b"), held)
    await refused_as_claimed(file(stack, held), held)
    read = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert (read.status, read.issue_url, read.etag) == (pb.STATUS_OPEN, "", held.etag)
    assert await audit_actions(stack, fb.name) == [pb.AUDIT_ACTION_CLAIM_FEEDBACK]
    # The holder's session triages and files.
    triaged = await update(stack, held, pb.STATUS_TRIAGED, "tab-a")
    assert triaged.status == pb.STATUS_TRIAGED and triaged.claim.session == "tab-a"
    filed = await file(stack, triaged, "tab-a")
    assert filed.status == pb.STATUS_FILED and filed.issue_url
    assert await audit_actions(stack, fb.name) == [pb.AUDIT_ACTION_CLAIM_FEEDBACK, pb.AUDIT_ACTION_UPDATE_FEEDBACK,
                                                   pb.AUDIT_ACTION_FILE_FEEDBACK]


async def test_a_released_or_expired_claim_no_longer_stops_anyone(stack: Stack):
    fb = await reported(stack)
    held = await claim(stack, fb.name, "tab-a", 60)
    await refused_as_claimed(update(stack, held, pb.STATUS_TRIAGED, "tab-b"), held)
    await release(stack, fb.name, "tab-a")
    assert (await update(stack, held, pb.STATUS_TRIAGED)).status == pb.STATUS_TRIAGED  # no session needed now
    other = await reported(stack)
    held = await claim(stack, other.name, "tab-a", 5)
    await refused_as_claimed(file(stack, held, "tab-b"), held)
    deadline = time.monotonic() + 30  # the lease runs out on PostgreSQL's clock: wait for the reads to say so
    while (await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=other.name), metadata=stack.md())
           ).HasField("claim"):
        assert time.monotonic() < deadline, "the 5 s claim never expired"
        await asyncio.sleep(0.2)
    assert (await file(stack, held, "tab-b")).status == pb.STATUS_FILED


async def test_another_owner_gets_not_found_before_any_claim_is_shown(stack: Stack):
    fb = await reported(stack)
    held = await claim(stack, fb.name, "tab-a", 60)
    await expect_error(update(stack, held, pb.STATUS_TRIAGED, "tab-a", sub="bob"), grpc.StatusCode.NOT_FOUND)
    await expect_error(file(stack, held, "tab-a", sub="bob"), grpc.StatusCode.NOT_FOUND)


async def test_a_claim_taken_during_racing_updates_is_honoured(stack: Stack):
    # Claims and updates lock the report's row; an update that waited for a claim's transaction sees it.
    fb = await reported(stack)
    results = await asyncio.gather(claim(stack, fb.name, "tab-a", 60),
                                   *(update(stack, fb, pb.STATUS_DISMISSED, "tab-b") for _ in range(4)),
                                   return_exceptions=True)
    audit = await audit_actions(stack, fb.name)
    read = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert isinstance(results[0], pb.Feedback), results[0]
    updated = audit.index(pb.AUDIT_ACTION_UPDATE_FEEDBACK) if pb.AUDIT_ACTION_UPDATE_FEEDBACK in audit else None
    # Whatever won, no update landed after the claim: the claim is first or the one update precedes it.
    assert updated is None or updated < audit.index(pb.AUDIT_ACTION_CLAIM_FEEDBACK), audit
    assert read.status in (pb.STATUS_OPEN, pb.STATUS_DISMISSED)


async def test_a_bad_review_session_names_the_field(stack: Stack):
    fb = await reported(stack)
    for bad in ("tab one", "x" * 65):
        e = await expect_error(update(stack, fb, pb.STATUS_TRIAGED, bad), grpc.StatusCode.INVALID_ARGUMENT)
        assert "review_session" in e.details()
        e = await expect_error(file(stack, fb, bad), grpc.StatusCode.INVALID_ARGUMENT)
        assert "review_session" in e.details()
