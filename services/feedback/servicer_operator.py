"""FeedbackService's operator and issue-13 methods (GetFeedbackStats, ListRecentFeedback, GetTurnFeedback,
ListAuditRecords, ReportSuspectedDefect), mixed into `servicer.FeedbackServicer` so each module stays a
thin page: each method validates its request, calls one use case (`statistics.Stats`, `audit.Audit`,
`defect_reports.DefectReports`) and returns a proto.
"""
from __future__ import annotations

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common import pages
from services.common.auth import current_principal
from services.common.errors import InvalidArgument
from services.common.ids import check_text, page_size, page_token_text, parse_name, parse_request_id
from services.common.ids import request_fingerprint
from services.feedback import codec, domain
from services.feedback.judgements import check_slug
from services.feedback.audit import METHOD_PREFIX, Audit
from services.feedback.defect_reports import DefectReports
from services.feedback.model import AuditRecord
from services.feedback.statistics import Stats, Vocabulary


def audit_pb(r: AuditRecord) -> pb.AuditRecord:
    e = r.entry
    out = pb.AuditRecord(name=f"auditRecords/{r.id}", actor=e.actor, action=e.action, feedback=f"feedback/{e.feedback_id}",
                         owner=e.owner, method=e.method)
    out.time.FromDatetime(r.time)
    for f, old, new in e.changes:
        out.changes.add(field=f, old_value=old, new_value=new)
    return out


class OperatorMethods:
    """Needs `_stats`, `_audit`, `_defects` and `_pb(report) -> pb.Feedback` on the servicer."""

    _stats: Stats
    _audit: Audit
    _defects: DefectReports

    async def GetFeedbackStats(self, request: pb.GetFeedbackStatsRequest, context) -> pb.FeedbackStats:  # noqa: N802
        """Counts over the window (UTC days ending today), every owner, USER-origin ratings only."""
        words = Vocabulary(*(check_slug(getattr(request, k), k) or getattr(Vocabulary, k)
                             for k in ("reaction_aspect", "completion_aspect", "complete_choice")))
        return codec.stats_pb(await self._stats.window(request.window_days, words))

    async def ListRecentFeedback(self, request: pb.ListRecentFeedbackRequest, context) -> pb.ListRecentFeedbackResponse:  # noqa: N802
        """Operator feed: USER ratings and reports of every owner, newest first, filtered, paged (Stats.recent);
        a page token is bound to the filters it was issued for (other filters → INVALID_ARGUMENT)."""
        size = page_size(request.page_size, 50, 500)
        f = codec.recent_filter(request)
        if f.aspect and not domain.ASPECT_SLUG.match(f.aspect):
            raise InvalidArgument("aspect", "must be a slug [a-z][a-z0-9_]{0,63}")
        pos = pages.read(request.page_token, codec.filters(f))
        after = (pages.page_token_time(pos.get("t")), page_token_text(pos.get("i"))) if pos else None
        items = await self._stats.recent(f, after, size)
        page = [pb.RecentItem(rating=codec.rating_pb(it.rating)) if it.rating is not None
                else pb.RecentItem(feedback=self._pb(it.report)) for it in items[:size]]
        n = pages.fit(page)
        await self._audit.read_bodies(current_principal(), [i.report for i in items[:n] if i.report],
                                      METHOD_PREFIX + "ListRecentFeedback")
        out = pb.ListRecentFeedbackResponse(items=page[:n])
        if len(items) > n:
            last = items[n - 1]
            out.next_page_token = pages.issue({"t": last.time.isoformat(), "i": last.id}, codec.filters(f))
        return out

    async def GetTurnFeedback(self, request: pb.GetTurnFeedbackRequest, context) -> pb.TurnFeedback:  # noqa: N802
        """Everything one user said about one turn (`feedback:admin`); reading another owner's report
        bodies is recorded (READ_BODY). An unknown turn is an empty view."""
        parse_name(request.conversation, "instances/{}", "conversation")
        if request.turn_index < 0:
            raise InvalidArgument("turn_index", "must not be negative")
        user = check_text(request.user, "user", 256, required=True)
        ratings, reports = await self._stats.turn(user, request.conversation, request.turn_index)
        await self._audit.read_bodies(current_principal(), reports, METHOD_PREFIX + "GetTurnFeedback")
        return pb.TurnFeedback(conversation=request.conversation, turn_index=request.turn_index, user=user,
                               ratings=[codec.rating_pb(r) for r in ratings], feedback=[self._pb(r) for r in reports])

    async def ListAuditRecords(self, request: pb.ListAuditRecordsRequest, context) -> pb.ListAuditRecordsResponse:  # noqa: N802
        """Newest first; every record for `feedback:admin`, else those about the caller's own reports."""
        size = page_size(request.page_size, 50, 1000)
        fid = parse_name(request.feedback, "feedback/{}", "feedback")[0] if request.feedback else ""
        filters = {"feedback": fid}
        pos = pages.read(request.page_token, filters)
        after = (pages.page_token_time(pos.get("t")), page_token_text(pos.get("i"))) if pos else None
        got = await self._audit.list(current_principal(), fid, after, size)
        items = [audit_pb(r) for r in got[:size]]
        n = pages.fit(items)
        out = pb.ListAuditRecordsResponse(audit_records=items[:n])
        if len(got) > n:
            last = got[n - 1]
            out.next_page_token = pages.issue({"t": last.time.isoformat(), "i": last.id}, filters)
        return out

    async def ReportSuspectedDefect(self, request: pb.ReportSuspectedDefectRequest, context) -> pb.Feedback:  # noqa: N802
        """One call: a suspected defect → a report anchored to its turn (DefectReports.report)."""
        rid = parse_request_id(request.request_id, "request_id", required=True)
        r = await self._defects.report(current_principal(), request.suspected_defect, rid, request_fingerprint(request))
        return self._pb(r)
