"""Review claims (ClaimFeedback / ReleaseFeedback, issue 28) against the real service and PostgreSQL: a
lease held in the service — another session sees it on every read and cannot take it until it ends or
expires; the holder renews it; release ends it at once; owner-scoped (another owner's report is
NOT_FOUND) with the triage scope; audited (a new claimant and a release, never a renewal); bad requests
name their fields; two sessions racing for one report never both get it."""
from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf import duration_pb2

from services.common.auth import SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE
from services.common.errors import error_info
from tests.helpers.claims import audit_actions, claim, release, reported
from tests.helpers.feedback import expect_error
from tests.stack import Stack


async def test_a_claim_is_a_lease_seen_by_other_sessions_renewed_by_its_holder_and_released(stack: Stack):
    fb = await reported(stack)
    t0 = time.time()
    got = await claim(stack, fb.name, "tab-a", 60)
    assert (got.claim.claimant, got.claim.session) == ("alice", "tab-a")
    assert t0 + 55 <= got.claim.expire_time.seconds <= time.time() + 61
    # Every read shows it: GetFeedback and ListFeedback.
    read = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    listed = await stack.feedback().ListFeedback(pb.ListFeedbackRequest(), metadata=stack.md())
    assert read.claim == got.claim and [f.claim for f in listed.feedback] == [got.claim]
    # Another session cannot take it: FAILED_PRECONDITION naming who holds it until when.
    e = await expect_error(claim(stack, fb.name, "tab-b", 60), grpc.StatusCode.FAILED_PRECONDITION)
    info = error_info(e)
    assert info.reason == "FEEDBACK_CLAIMED" and info.metadata["claimant"] == "alice"
    assert info.metadata["expire_time"].startswith(got.claim.expire_time.ToJsonString()[:19])
    await expect_error(release(stack, fb.name, "tab-b"), grpc.StatusCode.FAILED_PRECONDITION)
    # The holder renews (a later expiry), then releases; then the other session gets it.
    renewed = await claim(stack, fb.name, "tab-a", 120)
    assert renewed.claim.expire_time.seconds > got.claim.expire_time.seconds
    freed = await release(stack, fb.name, "tab-a")
    assert not freed.HasField("claim")
    read = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert not read.HasField("claim")
    await release(stack, fb.name, "tab-a")  # nothing to end: OK, nothing recorded
    taken = await claim(stack, fb.name, "tab-b", 60)
    assert taken.claim.session == "tab-b"
    # Audited: each new claimant and the release; the renewal and the empty release are not.
    assert await audit_actions(stack, fb.name) == [pb.AUDIT_ACTION_CLAIM_FEEDBACK, pb.AUDIT_ACTION_RELEASE_FEEDBACK,
                                                   pb.AUDIT_ACTION_CLAIM_FEEDBACK]


async def test_an_expired_claim_is_shown_as_none_and_taken_over(stack: Stack):
    fb = await reported(stack)
    await claim(stack, fb.name, "tab-a", 1)
    await asyncio.sleep(1.2)
    read = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert not read.HasField("claim")
    assert (await claim(stack, fb.name, "tab-b", 30)).claim.session == "tab-b"
    assert await audit_actions(stack, fb.name) == [pb.AUDIT_ACTION_CLAIM_FEEDBACK, pb.AUDIT_ACTION_CLAIM_FEEDBACK]


async def test_claims_are_owner_scoped_and_need_the_triage_scope(stack: Stack):
    fb = await reported(stack, "alice")
    await expect_error(claim(stack, fb.name, "tab", sub="bob"), grpc.StatusCode.NOT_FOUND)
    await expect_error(release(stack, fb.name, "tab", sub="bob"), grpc.StatusCode.NOT_FOUND)
    no_triage = stack.md("alice", (SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE))
    await expect_error(claim(stack, fb.name, "tab", md=no_triage), grpc.StatusCode.PERMISSION_DENIED)
    read = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert not read.HasField("claim") and await audit_actions(stack, fb.name) == []


@pytest.mark.parametrize(("session", "ttl_s", "fields"), [
    ("", None, ["session"]), ("x" * 65, None, ["session"]), ("tab one", None, ["session"]),
    ("tab", 0.5, ["ttl"]), ("tab", 1801, ["ttl"]), ("", 3600, ["session", "ttl"]),
])
async def test_bad_claims_name_their_fields(stack: Stack, session, ttl_s, fields):
    fb = await reported(stack)
    e = await expect_error(claim(stack, fb.name, session, ttl_s), grpc.StatusCode.INVALID_ARGUMENT)
    for f in fields:
        assert f in e.details()
    await expect_error(claim(stack, "feedback/", "tab"), grpc.StatusCode.INVALID_ARGUMENT)


@pytest.mark.parametrize(("seconds", "nanos"), [
    (5, -1), (-5, 1), (5, 1_000_000_000), (5, -1_000_000_000), (315_576_000_001, 0), (-315_576_000_001, 0),
])
async def test_a_ttl_that_is_no_valid_duration_is_refused_naming_ttl_and_nothing_is_claimed(stack: Stack, seconds,
                                                                                              nanos):
    """google.protobuf.Duration: seconds within ±315,576,000,000, |nanos| < 1e9, both of one sign.
    `ttl={seconds: 5, nanos: -1}` (mixed signs) was read as 4.999999999 s and claimed the report; now
    every invalid Duration is INVALID_ARGUMENT naming `ttl` (services.common.ids.parse_duration) and
    the report stays unclaimed, with nothing audited."""
    fb = await reported(stack)
    bad = pb.ClaimFeedbackRequest(name=fb.name, session="tab", ttl=duration_pb2.Duration(seconds=seconds, nanos=nanos))
    e = await expect_error(stack.feedback().ClaimFeedback(bad, metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "ttl" and "Duration" in e.details()
    read = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert not read.HasField("claim") and await audit_actions(stack, fb.name) == []
    ok = await claim(stack, fb.name, "tab", 4.5)  # a valid Duration with nanos: 4.5 s
    assert ok.claim.session == "tab"


async def test_sessions_racing_for_one_report_get_one_claim(stack: Stack):
    fb = await reported(stack)
    results = await asyncio.gather(*(claim(stack, fb.name, f"tab-{i}", 60) for i in range(8)), return_exceptions=True)
    won = [r for r in results if isinstance(r, pb.Feedback)]
    lost = [r for r in results if not isinstance(r, pb.Feedback)]
    assert len(won) == 1, results
    assert all(r.code() == grpc.StatusCode.FAILED_PRECONDITION for r in lost)
    assert await audit_actions(stack, fb.name) == [pb.AUDIT_ACTION_CLAIM_FEEDBACK]
