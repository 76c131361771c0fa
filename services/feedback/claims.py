"""Review claims, the use case (issue 28): a lease on one report for one review session, held in the
service so two reviewers of one owner's queue (e.g. operators sharing the owner's account) do not work
the same item.

Owner-scoped like UpdateFeedback (scope `feedback:triage`, checked by METHOD_SCOPES): another owner's
report is NOT_FOUND. A claimant is (`sub`, session); another claimant's live claim is
FAILED_PRECONDITION, reason FEEDBACK_CLAIMED (metadata `claimant`, `expire_time`); the holder's call
renews it; an expired one is taken over. A new claimant and a release are audited (CLAIM_FEEDBACK /
RELEASE_FEEDBACK), a renewal is not. Triage honours it (`check_holder`, called by Reports.update / file):
only the holder's session may change or file a claimed report until the claim ends or expires.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace

from services.common.auth import Principal
from services.common.clip import clip
from services.common.errors import FailedPrecondition, NotFound
from services.feedback.audit import entry
from services.feedback.model.enums import AuditAction
from services.feedback.model.report import Claim, Report
from services.feedback.repository.claims import ClaimStore

CLAIMED = "FEEDBACK_CLAIMED"


def _held(c: Claim) -> FailedPrecondition:
    until = c.expire_time.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return FailedPrecondition(f"claimed by {clip(c.claimant, 64)} in another review session until {until}",
                              reason=CLAIMED, claimant=c.claimant, expire_time=until)


def check_holder(claim: Claim | None, sub: str, session: str) -> None:
    """Triage of a report with live claim `claim` by (`sub`, `session`): FAILED_PRECONDITION
    FEEDBACK_CLAIMED (claimant, expire_time) unless the claim is theirs or there is none. FAILED_PRECONDITION
    rather than ABORTED (AIP-193): an immediate re-read and retry cannot succeed while the claim lives."""
    if claim is not None and (claim.claimant, claim.session) != (sub, session):
        raise _held(claim)


class Claims:
    def __init__(self, store: ClaimStore):
        self._store = store

    async def claim(self, p: Principal, report: Report, session: str, ttl_s: float) -> Report:
        """`report` (the caller's, as just read) claimed for `session` for `ttl_s` seconds from now."""
        got = await self._store.claim(p.sub, report.id, p.sub, session, ttl_s,
                                      entry(p, AuditAction.CLAIM_FEEDBACK, report.id, report.owner))
        if not got.found:
            raise NotFound(report.name)
        if got.held:
            raise _held(got.held)
        return replace(report, claim=got.claim)

    async def release(self, p: Principal, report: Report, session: str) -> Report:
        """The caller's claim of `report` ended; free already is fine; another's live claim is refused."""
        got = await self._store.release(p.sub, report.id, p.sub, session,
                                        entry(p, AuditAction.RELEASE_FEEDBACK, report.id, report.owner))
        if not got.found:
            raise NotFound(report.name)
        if got.held:
            raise _held(got.held)
        return replace(report, claim=None)

    async def attach(self, reports: Sequence[Report]) -> list[Report]:
        """`reports` with their live claims (one statement for the lot)."""
        live = await self._store.live([r.id for r in reports])
        return [replace(r, claim=live.get(r.id)) for r in reports]
