"""The audit trail, the use case (issue 13): every triage mutation — UpdateFeedback, FileFeedback,
DeleteFeedback, the MCP server's `resolve_feedback` — and every admin read of another owner's report
body is recorded: who (the caller's `sub`), when, which report and its owner, the RPC, and what changed
(status and issue_url, old → new; never the body, nothing else). A mutation's record is written in the
mutation's own transaction (`Reports` hands the store an entry); a no-op records nothing.

Reading (ListAuditRecords): `feedback:admin` lists every record; anyone else (`feedback:read`) the
records about their own reports, including who read them. Newest first, keyset (time, id).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from services.common.auth import SCOPE_FEEDBACK_ADMIN, SCOPE_FEEDBACK_READ, TOOL_METADATA, Principal
from services.feedback.model.audit import AuditEntry, AuditRecord
from services.feedback.model.enums import AuditAction, Status
from services.feedback.model.report import Report
from services.feedback.repository.audit import AuditStore

METHOD_PREFIX = "/agentfeedback.feedback.v1.FeedbackService/"
_METHODS = {AuditAction.UPDATE_FEEDBACK: "UpdateFeedback", AuditAction.RESOLVE_FEEDBACK: "UpdateFeedback",
            AuditAction.FILE_FEEDBACK: "FileFeedback", AuditAction.DELETE_FEEDBACK: "DeleteFeedback",
            AuditAction.CLAIM_FEEDBACK: "ClaimFeedback", AuditAction.RELEASE_FEEDBACK: "ReleaseFeedback"}


def update_action(metadata: Iterable[tuple[str, str]] | None) -> AuditAction:
    """The action an UpdateFeedback claims: RESOLVE_FEEDBACK when it says the MCP server's
    `resolve_feedback` sent it, else UPDATE. A claim only: `Reports.update` records RESOLVE only when
    the call also carries the MCP server's credential (`x-agentfeedback-actor`, scope `feedback:tool`)."""
    tool = next((v for k, v in (metadata or ()) if k == TOOL_METADATA), "")
    return AuditAction.RESOLVE_FEEDBACK if tool == "resolve_feedback" else AuditAction.UPDATE_FEEDBACK


def changed(before: Report | None, after: Report | None) -> tuple[tuple[str, str, str], ...]:
    """(field, old, new) of what a triage change changed: status (enum names) and issue_url."""
    if before is None or after is None:
        return ()
    out = []
    if before.status != after.status:
        out.append(("status", f"STATUS_{Status(before.status).name}", f"STATUS_{Status(after.status).name}"))
    if before.issue_url != after.issue_url:
        out.append(("issue_url", before.issue_url, after.issue_url))
    return tuple(out)


def entry(p: Principal, action: AuditAction, report_id: str, owner: str, before: Report | None = None,
          after: Report | None = None, method: str = "") -> AuditEntry:
    return AuditEntry(p.sub, action, report_id, owner, changed(before, after),
                      METHOD_PREFIX + (method or _METHODS.get(action, "")))


class Audit:
    def __init__(self, repo: AuditStore):
        self._repo = repo

    async def read_bodies(self, p: Principal, reports: Iterable[Report], method: str) -> None:
        """Record READ_BODY for each report of another owner `p` is about to see (one statement). `method`:
        the RPC's short name (`GetTurnFeedback`); the record holds its full name."""
        await self._repo.record_audit([entry(p, AuditAction.READ_BODY, r.id, r.owner, method=method)
                                       for r in reports if r.owner != p.sub])

    async def list(self, p: Principal, feedback_id: str, after: tuple[dt.datetime, str] | None,
                   size: int) -> list[AuditRecord]:
        """At most `size` + 1 records (one more tells the caller there is a next page). Every record with
        `feedback:admin`; else those about the caller's reports with `feedback:read` (PERMISSION_DENIED
        without either)."""
        owner = None if SCOPE_FEEDBACK_ADMIN in p.scopes else p.sub
        if owner is not None:
            p.require(SCOPE_FEEDBACK_READ)
        return await self._repo.list_audit(owner, feedback_id, after, size + 1)
