"""Which write requests are retries whose answer is stored: the write quota's `answered` checks
(services/common/quota.py), asked only when the quota would refuse the call.

A retry of an acknowledged write must get its answer, not RESOURCE_EXHAUSTED (AIP-155; the brief:
a client retrying after a lost response gets its answer). Each check looks only at what the handler
would answer from, and the handler still decides: a confirmed call writes nothing (a request id
reused for other content is INVALID_ARGUMENT there, as within the quota).

- CreateFeedback: the create request id's report, or its deletion within the request retention (both
  key the create ledger `feedback_create_requests`); ReportSuspectedDefect: the same for the defect's
  own request id (`defect_reports.defect_request_id`: one report per defect).
- UpdateFeedback, PutRating, CopyRatings: a live record of the request id in the request ledger.
- FileFeedback: the report is filed (a retry returns the stored ticket URL).
A request without a request id (or with one that does not parse) is never confirmed.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from services.common import ledger
from services.common.errors import InvalidArgument
from services.common.ids import parse_name, parse_trace_id, request_id_of
from services.feedback.defect_reports import defect_request_id
from services.feedback.repository.reports import ReportStore


def answered_checks(repo: ReportStore) -> dict[str, Callable[[str, Any], Awaitable[bool]]]:
    """Method short name → `(owner, request) → bool` (True: a retry whose answer is stored)."""

    async def created(owner: str, request: Any) -> bool:
        rid = request_id_of(request)
        return rid is not None and await repo.create_answered(owner, rid, ledger.RETENTION_S)

    async def defect_reported(owner: str, request: Any) -> bool:
        try:
            instance, trace_id = parse_name(request.suspected_defect, "instances/{}/suspectedDefects/{}", "x")
            canonical = f"instances/{instance}/suspectedDefects/{parse_trace_id(trace_id, 'x')}"
        except InvalidArgument:
            return False
        return await repo.create_answered(owner, defect_request_id(canonical), ledger.RETENTION_S)

    def recorded(method: str) -> Callable[[str, Any], Awaitable[bool]]:
        async def check(owner: str, request: Any) -> bool:
            rid = request_id_of(request)
            return rid is not None and await repo.request_recorded(method, owner, rid, ledger.RETENTION_S)
        return check

    async def filed(owner: str, request: Any) -> bool:
        try:
            (fid,) = parse_name(request.name, "feedback/{}", "name")
        except InvalidArgument:
            return False
        report = await repo.get_report(fid, owner)
        return report is not None and bool(report.issue_url)

    return {"CreateFeedback": created, "ReportSuspectedDefect": defect_reported, "UpdateFeedback": recorded("UpdateFeedback"),
            "PutRating": recorded("PutRating"), "CopyRatings": recorded("CopyRatings"), "FileFeedback": filed}
