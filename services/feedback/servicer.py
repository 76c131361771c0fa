"""`agentfeedback.feedback.v1.FeedbackService`: thin translation between protos and the use cases
(`reports.py`, `ratings.py`, `statistics.py`, `audit.py`, `defect_reports.py`), through `codec.py`.

Each method checks its request into the model with one codec call (one INVALID_ARGUMENT naming every
bad field), calls one use case and returns its answer as a proto; List methods page with
`services.common.pages.page`. Errors are raised as DomainError subclasses and mapped once by
`services.common.server.ServiceInterceptor`, which also checks METHOD_SCOPES before any handler.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from google.protobuf import empty_pb2

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.common import pages
from services.common.auth import (
    ACTOR_METADATA,
    SCOPE_FEEDBACK_ADMIN,
    SCOPE_FEEDBACK_EVALUATIONS,
    SCOPE_FEEDBACK_READ,
    SCOPE_FEEDBACK_TRIAGE,
    SCOPE_FEEDBACK_TURN_REMOVAL,
    SCOPE_FEEDBACK_WRITE,
    current_principal,
)
from services.common.errors import Aborted
from services.common.quota import checked
from services.feedback import codec, codec_feed, domain
from services.feedback.audit import Audit
from services.feedback.dataset import Datasets
from services.feedback.claims import Claims
from services.feedback.defect_reports import DefectReports
from services.feedback.evaluations import Evaluations
from services.feedback.feed import Feed
from services.feedback.webhooks import Webhooks
from services.feedback.model.report import Report
from services.feedback.ratings import Ratings
from services.feedback.reports import Reports
from services.feedback.statistics import Stats
from services.feedback.ticket import trace_url

SERVICE = "agentfeedback.feedback.v1.FeedbackService"
# Method → scope (docs/architecture.md "Contracts"; the proto's service comment).
METHOD_SCOPES: dict[str, str | None] = {
    f"/{SERVICE}/{m}": s
    for m, s in {
        "CreateFeedback": SCOPE_FEEDBACK_WRITE, "GetFeedback": SCOPE_FEEDBACK_READ, "ListFeedback": SCOPE_FEEDBACK_READ,
        "UpdateFeedback": SCOPE_FEEDBACK_TRIAGE, "DeleteFeedback": SCOPE_FEEDBACK_WRITE,
        "FileFeedback": SCOPE_FEEDBACK_TRIAGE, "PutRating": SCOPE_FEEDBACK_WRITE, "DeleteRating": SCOPE_FEEDBACK_WRITE,
        "ListRatings": SCOPE_FEEDBACK_READ, "CopyRatings": SCOPE_FEEDBACK_WRITE,
        "NoteTurnsRemoved": SCOPE_FEEDBACK_TURN_REMOVAL,  # the chat gateway's own credential only
        "CountConversationFeedback": SCOPE_FEEDBACK_READ,
        "GetFeedbackStats": SCOPE_FEEDBACK_ADMIN, "ListRecentFeedback": SCOPE_FEEDBACK_ADMIN,
        "GetTurnFeedback": SCOPE_FEEDBACK_ADMIN, "ListAuditRecords": None,  # admin or read: Audit.list
        "ReportSuspectedDefect": SCOPE_FEEDBACK_WRITE,
        "WatchFeedback": None,  # own events with feedback:read, every owner's with feedback:admin: Feed.scoped
        "CreateWebhookSubscription": SCOPE_FEEDBACK_ADMIN, "ListWebhookSubscriptions": SCOPE_FEEDBACK_ADMIN,
        "DeleteWebhookSubscription": SCOPE_FEEDBACK_ADMIN, "ResumeWebhookSubscription": SCOPE_FEEDBACK_ADMIN,
        "ListWebhookDeliveries": SCOPE_FEEDBACK_ADMIN, "ExportDataset": SCOPE_FEEDBACK_READ,
        "ExportPreferencePairs": SCOPE_FEEDBACK_READ,
        "ClaimFeedback": SCOPE_FEEDBACK_TRIAGE, "ReleaseFeedback": SCOPE_FEEDBACK_TRIAGE,
        "AcceptEvaluations": SCOPE_FEEDBACK_EVALUATIONS,  # the trace collector's own credential only
    }.items()
}


class FeedbackServicer(feedback_pb2_grpc.FeedbackServiceServicer):
    def __init__(self, reports: Reports, ratings: Ratings, stats: Stats, audit: Audit, defects: DefectReports,
                 feed: Feed, webhooks: Webhooks, datasets: Datasets, claims: Claims,
                 evaluations: Evaluations, trace_retention_days: int,
                 note_max_bytes: int, clock: Callable[[], dt.datetime]):
        self._reports = reports
        self._ratings = ratings
        self._stats = stats
        self._audit = audit
        self._defects = defects
        self._feed = feed
        self._webhooks = webhooks
        self._datasets = datasets
        self._claims = claims
        self._evaluations = evaluations
        self._retention_days = trace_retention_days
        self._note_max = note_max_bytes
        self._clock = clock

    # AGENTFEEDBACK_FEEDBACK_TRACE_URL_TEMPLATE (set by the server wiring): every report's trace link.
    trace_url_template = ""

    def request_checks(self) -> dict[str, Callable[[object, object], object]]:
        """Write method (short name) → `(request, context) → parsed`: its handler's own parse of the
        request (codec; local, no I/O). The write quota runs it before taking a token
        (services/common/quota.py `valid`), so a request that is INVALID_ARGUMENT on its face spends no
        quota, and the handler reuses its result (`quota.checked`) instead of parsing again."""
        return {"CreateFeedback": self._parse_create, "UpdateFeedback": self._parse_update,
                "FileFeedback": self._parse_file, "PutRating": self._parse_put, "CopyRatings": self._parse_copy,
                "ReportSuspectedDefect": self._parse_defect}

    @staticmethod
    def _parse_create(request: pb.CreateFeedbackRequest, context):
        return codec.create_feedback(request, _actor(context))

    @staticmethod
    def _parse_update(request: pb.UpdateFeedbackRequest, context):
        return codec.update_feedback(request, context.invocation_metadata())

    @staticmethod
    def _parse_file(request: pb.FileFeedbackRequest, context):
        return codec.file_feedback(request)

    def _parse_put(self, request: pb.PutRatingRequest, context):
        return codec.put_rating(request, self._note_max)

    @staticmethod
    def _parse_copy(request: pb.CopyRatingsRequest, context):
        return codec.copy_ratings(request)

    @staticmethod
    def _parse_defect(request: pb.ReportSuspectedDefectRequest, context):
        return codec.report_defect(request)

    def _pb(self, r: Report) -> pb.Feedback:
        fb = codec.feedback_pb(r, self._clock(), self._retention_days)
        fb.trace_url = trace_url(self.trace_url_template, r.snapshot.trace_id or r.anchor.trace_id)
        return fb

    # ------------------------------------------------------------ reports
    async def CreateFeedback(self, request: pb.CreateFeedbackRequest, context) -> pb.Feedback:  # noqa: N802
        """Create one report; a retry returns the first one (Reports.create has the rules and errors).
        AUTHOR_AGENT needs the agent's credential in metadata `x-agentfeedback-actor`."""
        return self._pb(await self._reports.create(current_principal(), checked(request, context, self._parse_create)))

    async def GetFeedback(self, request: pb.GetFeedbackRequest, context) -> pb.Feedback:  # noqa: N802
        """The caller's report `feedback/{id}`; NOT_FOUND when unknown or another owner's."""
        r = await self._reports.get(current_principal(), codec.feedback_id(request.name))
        return self._pb((await self._claims.attach([r]))[0])

    async def ListFeedback(self, request: pb.ListFeedbackRequest, context) -> pb.ListFeedbackResponse:  # noqa: N802
        """The caller's reports, newest first, filtered; keyset page tokens on (create_time, id), bound
        to the filters. INVALID_ARGUMENT naming the field: a timestamp outside google.protobuf.Timestamp's
        range, start_time after end_time, a page_token issued for other filters."""
        f, size = codec.list_feedback(request)
        p = current_principal()

        async def rows(after, n):  # each report with its live review claim (one more statement)
            return await self._claims.attach(await self._reports.list(p, f, after, n))

        got = await pages.page(request.page_token, size, codec.filters(f), pages.time_id, rows, self._pb,
                               lambda r: pages.time_id_key(r.create_time, r.id))
        return pb.ListFeedbackResponse(feedback=got.items, next_page_token=got.next_page_token)

    async def UpdateFeedback(self, request: pb.UpdateFeedbackRequest, context) -> pb.Feedback:  # noqa: N802
        """Status / issue_url change with field mask + etag (see the proto for the errors)."""
        fid, change = checked(request, context, self._parse_update)
        try:
            return self._pb(await self._reports.update(current_principal(), fid, change))
        except domain.Stale as e:
            raise Aborted(e.message, current=self._pb(e.item)) from None

    async def DeleteFeedback(self, request: pb.DeleteFeedbackRequest, context) -> empty_pb2.Empty:  # noqa: N802
        """Hard delete of the caller's report; NOT_FOUND when absent; a `request_id` retry is OK."""
        fid, rid = codec.name_and_request_id(request)
        await self._reports.delete(current_principal(), fid, rid)
        return empty_pb2.Empty()

    async def FileFeedback(self, request: pb.FileFeedbackRequest, context) -> pb.Feedback:  # noqa: N802
        """File the report's ticket once (Reports.file has the waits and errors)."""
        fid, session = checked(request, context, self._parse_file)
        return self._pb(await self._reports.file(current_principal(), fid, session))

    async def ClaimFeedback(self, request: pb.ClaimFeedbackRequest, context) -> pb.Feedback:  # noqa: N802
        """Claim (or renew) the caller's report for one review session (Claims.claim has the rules)."""
        fid, session, ttl = codec.claim_feedback(request)
        p = current_principal()
        return self._pb(await self._claims.claim(p, await self._reports.get(p, fid), session, ttl))

    async def ReleaseFeedback(self, request: pb.ReleaseFeedbackRequest, context) -> pb.Feedback:  # noqa: N802
        """End the session's claim of the caller's report (Claims.release)."""
        fid, session = codec.release_feedback(request)
        p = current_principal()
        return self._pb(await self._claims.release(p, await self._reports.get(p, fid), session))

    # ------------------------------------------------------------ ratings
    async def PutRating(self, request: pb.PutRatingRequest, context) -> pb.Rating:  # noqa: N802
        """Idempotent upsert / strict CAS of the caller's rating (see the proto)."""
        put = checked(request, context, self._parse_put)
        try:
            return codec.rating_pb(await self._ratings.put(current_principal(), put))
        except domain.Stale as e:
            raise Aborted(e.message, current=codec.rating_pb(e.item)) from None

    async def DeleteRating(self, request: pb.DeleteRatingRequest, context) -> empty_pb2.Empty:  # noqa: N802
        """Delete the caller's rating; deleting an absent (or foreign) rating succeeds and changes nothing."""
        await self._ratings.delete(current_principal(), codec.rating_id(request))
        return empty_pb2.Empty()

    async def ListRatings(self, request: pb.ListRatingsRequest, context) -> pb.ListRatingsResponse:  # noqa: N802
        """The caller's ratings of one conversation (optionally one turn), by turn, scope, aspect, or of
        every conversation (`instances/-`) newest first; filtered; a page token is bound to the filters."""
        conversation, turn, f, size = codec.list_ratings(request)
        p = current_principal()
        bound = codec.rating_filters(conversation, turn, f)
        if conversation == codec.EVERY_CONVERSATION:  # newest first across the caller's conversations
            got = await pages.page(request.page_token, size, bound, pages.time_id,
                                   lambda after, n: self._ratings.list_every(p, f, after, n), codec.rating_pb,
                                   lambda r: pages.time_id_key(r.update_time, r.id))
        else:
            got = await pages.page(request.page_token, size, bound, codec.rating_position,
                                   lambda after, n: self._ratings.list(p, conversation, turn, f, after, n),
                                   codec.rating_pb, codec.rating_position_key)
        return pb.ListRatingsResponse(ratings=got.items, next_page_token=got.next_page_token)

    async def CountConversationFeedback(self, request: pb.CountConversationFeedbackRequest,  # noqa: N802
                                        context) -> pb.CountConversationFeedbackResponse:
        """The caller's reports and own ratings per conversation (≤ 100; codec.count_conversations)."""
        counts = await self._stats.conversation_counts(current_principal().sub, codec.count_conversations(request))
        return pb.CountConversationFeedbackResponse(counts=[
            pb.ConversationFeedbackCount(conversation=c, reports=n_reports, ratings=n_ratings)
            for c, n_reports, n_ratings in counts])

    async def CopyRatings(self, request: pb.CopyRatingsRequest, context) -> pb.CopyRatingsResponse:  # noqa: N802
        """Copy the caller's ratings of turns ≤ through_turn_index onto a fork (Ratings.copy)."""
        source, target, through, rid = checked(request, context, self._parse_copy)
        n = await self._ratings.copy(current_principal(), source, target, through, rid)
        return pb.CopyRatingsResponse(copied_count=n)

    async def NoteTurnsRemoved(self, request: pb.NoteTurnsRemovedRequest,  # noqa: N802
                               context) -> pb.NoteTurnsRemovedResponse:
        """Chat removed `owner`'s turns (Ratings.note_turns_removed; codec.turns_removed); chat's credential
        only (METHOD_SCOPES)."""
        owner, conversation, ranges, trace_ids = codec.turns_removed(request)
        n, marked = await self._ratings.note_turns_removed(owner, conversation, ranges, trace_ids)
        return pb.NoteTurnsRemovedResponse(deleted_rating_count=n, marked_report_count=marked)

    # ------------------------------------------------------------ operators
    async def GetFeedbackStats(self, request: pb.GetFeedbackStatsRequest, context) -> pb.FeedbackStats:  # noqa: N802
        """Counts over the window (UTC days ending today), every owner, USER-origin ratings only."""
        return codec.stats_pb(await self._stats.window(request.window_days, codec.stats_words(request)))

    async def ListRecentFeedback(self, request: pb.ListRecentFeedbackRequest, context  # noqa: N802
                                 ) -> pb.ListRecentFeedbackResponse:
        """Operator feed: USER ratings and reports of every owner, newest first, filtered, paged (Stats.recent);
        a page token is bound to the filters it was issued for (other filters → INVALID_ARGUMENT). Reading
        another owner's report body is recorded (READ_BODY)."""
        f, size = codec.list_recent(request)
        got = await pages.page(request.page_token, size, codec.filters(f), pages.time_id,
                               lambda after, n: self._stats.recent(f, after, n),
                               lambda it: pb.RecentItem(rating=codec.rating_pb(it.rating)) if it.rating is not None
                               else pb.RecentItem(feedback=self._pb(it.report)),
                               lambda it: pages.time_id_key(it.time, it.id))
        await self._audit.read_bodies(current_principal(), [i.report for i in got.rows if i.report],
                                      "ListRecentFeedback")
        return pb.ListRecentFeedbackResponse(items=got.items, next_page_token=got.next_page_token)

    async def GetTurnFeedback(self, request: pb.GetTurnFeedbackRequest, context) -> pb.TurnFeedback:  # noqa: N802
        """Everything one user said about one turn (`feedback:admin`); reading another owner's report
        bodies is recorded (READ_BODY). An unknown turn is an empty view."""
        conversation, turn_index, user = codec.turn_feedback(request)
        ratings, reports = await self._stats.turn(user, conversation, turn_index)
        await self._audit.read_bodies(current_principal(), reports, "GetTurnFeedback")
        evaluations = await self._evaluations.of_turn(conversation, turn_index)
        return pb.TurnFeedback(conversation=conversation, turn_index=turn_index, user=user,
                               ratings=[codec.rating_pb(r) for r in ratings], feedback=[self._pb(r) for r in reports],
                               evaluations=[codec.evaluation_rating_pb(e) for e in evaluations])

    async def AcceptEvaluations(self, request: pb.AcceptEvaluationsRequest, context  # noqa: N802
                                ) -> pb.AcceptEvaluationsResponse:
        """Evaluations received over OTLP become ratings with an author kind (Evaluations.accept)."""
        got = await self._evaluations.accept(current_principal(), codec.accept_evaluations(request))
        return pb.AcceptEvaluationsResponse(outcomes=[pb.EvaluationOutcome(
            state=o.state, rating=o.stored.name if o.stored else "", reason=o.reason) for o in got])

    async def ListAuditRecords(self, request: pb.ListAuditRecordsRequest, context  # noqa: N802
                               ) -> pb.ListAuditRecordsResponse:
        """Newest first; every record for `feedback:admin`, else those about the caller's own reports."""
        fid, size = codec.list_audit(request)
        p = current_principal()
        got = await pages.page(request.page_token, size, {"feedback": fid}, pages.time_id,
                               lambda after, n: self._audit.list(p, fid, after, n), codec.audit_pb,
                               lambda r: pages.time_id_key(r.time, r.id))
        return pb.ListAuditRecordsResponse(audit_records=got.items, next_page_token=got.next_page_token)

    async def ReportSuspectedDefect(self, request: pb.ReportSuspectedDefectRequest, context  # noqa: N802
                                    ) -> pb.Feedback:
        """One call: a suspected defect → a report anchored to its turn (DefectReports.report)."""
        name, anchor, rid, fingerprint = checked(request, context, self._parse_defect)
        return self._pb(await self._defects.report(current_principal(), name, anchor, rid, fingerprint))

    # ------------------------------------------------------------ change feed
    async def WatchFeedback(self, request: pb.WatchFeedbackRequest, context):  # noqa: N802
        """The change feed from a position (see the proto; Feed.start / Feed.watch have the rules)."""
        p = current_principal()
        f, after = codec_feed.watch_feedback(request)
        f = self._feed.scoped(p, f, request.include_text)
        start = await self._feed.start(after, request.from_oldest)
        async for item in self._feed.watch(p, f, start, request.include_text):
            yield codec_feed.watch_response(item, self._clock(), self._retention_days)

    # ------------------------------------------------------------ webhooks (feedback:admin)
    async def CreateWebhookSubscription(self, request: pb.CreateWebhookSubscriptionRequest, context  # noqa: N802
                                        ) -> pb.WebhookSubscription:
        """A subscription from now on; its secret in this answer only (Webhooks.create)."""
        url, f, rid = codec_feed.create_webhook(request)
        sub, secret = await self._webhooks.create(current_principal(), url, f, rid)
        return codec_feed.webhook_pb(sub, secret)

    async def ListWebhookSubscriptions(self, request: pb.ListWebhookSubscriptionsRequest, context  # noqa: N802
                                       ) -> pb.ListWebhookSubscriptionsResponse:
        """Every subscription, oldest first, keyset paged (secrets never)."""
        got = await pages.page(request.page_token, pages.page_size(request.page_size, 50, 1000), {}, pages.time_id,
                               self._webhooks.list, codec_feed.webhook_pb,
                               lambda w: pages.time_id_key(w.create_time, w.id))
        return pb.ListWebhookSubscriptionsResponse(webhook_subscriptions=got.items,
                                                   next_page_token=got.next_page_token)

    async def DeleteWebhookSubscription(self, request: pb.DeleteWebhookSubscriptionRequest, context  # noqa: N802
                                        ) -> empty_pb2.Empty:
        """Nothing more is sent; NOT_FOUND when absent."""
        await self._webhooks.delete(codec_feed.subscription_id(request.name))
        return empty_pb2.Empty()

    async def ResumeWebhookSubscription(self, request: pb.ResumeWebhookSubscriptionRequest, context  # noqa: N802
                                        ) -> pb.WebhookSubscription:
        """DEAD_LETTERED → ACTIVE, retrying the event it stopped at; NOT_FOUND when absent."""
        return codec_feed.webhook_pb(await self._webhooks.resume(codec_feed.subscription_id(request.name)))

    async def ListWebhookDeliveries(self, request: pb.ListWebhookDeliveriesRequest, context  # noqa: N802
                                    ) -> pb.ListWebhookDeliveriesResponse:
        """The subscription's delivery attempts, newest first, keyset paged."""
        sid, size = codec_feed.list_deliveries(request)
        got = await pages.page(request.page_token, size, {"parent": request.parent}, codec_feed.delivery_position,
                               lambda before, n: self._webhooks.deliveries(sid, before, n), codec_feed.delivery_pb,
                               lambda d: {"i": d.id})
        return pb.ListWebhookDeliveriesResponse(deliveries=got.items, next_page_token=got.next_page_token)

    # ------------------------------------------------------------ datasets
    async def ExportDataset(self, request: pb.ExportDatasetRequest, context):  # noqa: N802
        """The caller's labelled turns as records (Datasets.export has the rules)."""
        f, after = codec_feed.export_dataset(request)
        async for t in self._datasets.export(current_principal(), f, after):
            yield codec_feed.dataset_record(t, self._clock(), self._retention_days)

    async def ExportPreferencePairs(self, request: pb.ExportPreferencePairsRequest, context):  # noqa: N802
        """Preference pairs from the caller's forks (Datasets.preference_pairs has the rules)."""
        aspect = codec_feed.export_pairs(request)
        async for x in self._datasets.preference_pairs(current_principal(), aspect):
            yield codec_feed.pair_pb(x)


def _actor(context) -> str | None:
    """The `x-agentfeedback-actor` metadata value (an agent's credential), None when absent."""
    return next((v for k, v in (context.invocation_metadata() or ()) if k == ACTOR_METADATA), None)
