"""`agentfeedback.feedback.v1.FeedbackService`: thin translation between protos and the use cases
(`reports.py`, `ratings.py`, `statistics.py`), through `codec.py`.

Each method validates its request into the model (INVALID_ARGUMENT naming the field), calls one use
case and returns its answer as a proto. Errors are raised as DomainError subclasses and mapped once
by `services.common.server.ServiceInterceptor`, which also checks METHOD_SCOPES before any handler.
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
    SCOPE_FEEDBACK_READ,
    SCOPE_FEEDBACK_TRIAGE,
    SCOPE_FEEDBACK_WRITE,
    current_principal,
)
from services.common.errors import InvalidArgument
from services.common.etags import parse_etag
from services.common.ids import (
    check_text,
    page_token_int,
    page_size,
    page_token_text,
    parse_name,
    parse_request_id,
    parse_timestamp,
    parse_trace_id,
    request_fingerprint,
)
from services.feedback import audit, codec, domain
from services.feedback.codec import enum_value
from services.feedback.judgements import check_reasons, check_slug
from services.feedback.model import (
    Author,
    Category,
    RatingSentiment,
    RatingWrite,
    Report,
    ReportFilter,
    Sentiment,
    Status,
    Surface,
)
from services.feedback.ratings import Ratings
from services.feedback.reports import Change, ReportDraft, Reports
from services.feedback.servicer_operator import OperatorMethods
from services.feedback.statistics import Stats
from services.feedback.audit import Audit
from services.feedback.defect_reports import DefectReports
from services.feedback import codec_feed, feed_domain
from services.feedback.feed import Feed
from services.feedback.webhooks import Webhooks

SERVICE = "agentfeedback.feedback.v1.FeedbackService"
# Method → scope (docs/architecture.md "Contracts"; the proto's service comment).
METHOD_SCOPES: dict[str, str | None] = {
    f"/{SERVICE}/{m}": s
    for m, s in {
        "CreateFeedback": SCOPE_FEEDBACK_WRITE, "GetFeedback": SCOPE_FEEDBACK_READ, "ListFeedback": SCOPE_FEEDBACK_READ,
        "UpdateFeedback": SCOPE_FEEDBACK_TRIAGE, "DeleteFeedback": SCOPE_FEEDBACK_WRITE,
        "FileFeedback": SCOPE_FEEDBACK_TRIAGE, "PutRating": SCOPE_FEEDBACK_WRITE, "DeleteRating": SCOPE_FEEDBACK_WRITE,
        "ListRatings": SCOPE_FEEDBACK_READ, "CopyRatings": SCOPE_FEEDBACK_WRITE,
        "GetFeedbackStats": SCOPE_FEEDBACK_ADMIN, "ListRecentFeedback": SCOPE_FEEDBACK_ADMIN,
        "GetTurnFeedback": SCOPE_FEEDBACK_ADMIN, "ListAuditRecords": None,  # admin or read: Audit.list
        "ReportSuspectedDefect": SCOPE_FEEDBACK_WRITE,
        "WatchFeedback": None,  # own events with feedback:read, every owner's with feedback:admin: Feed.scoped
        "CreateWebhookSubscription": SCOPE_FEEDBACK_ADMIN, "ListWebhookSubscriptions": SCOPE_FEEDBACK_ADMIN,
        "DeleteWebhookSubscription": SCOPE_FEEDBACK_ADMIN, "ResumeWebhookSubscription": SCOPE_FEEDBACK_ADMIN,
        "ListWebhookDeliveries": SCOPE_FEEDBACK_ADMIN,
    }.items()
}


def _feedback_id(name: str, field_path: str) -> str:
    return parse_name(name, "feedback/{}", field_path)[0]


class FeedbackServicer(OperatorMethods, feedback_pb2_grpc.FeedbackServiceServicer):
    def __init__(self, reports: Reports, ratings: Ratings, stats: Stats, trace_retention_days: int,
                 note_max_bytes: int, clock: Callable[[], dt.datetime], audit_: Audit, defects: DefectReports,
                 feed: Feed, webhooks: Webhooks):
        self._feed, self._webhooks = feed, webhooks
        self._audit, self._defects = audit_, defects
        self._reports = reports
        self._ratings = ratings
        self._stats = stats
        self._retention_days = trace_retention_days
        self._note_max = note_max_bytes
        self._clock = clock

    def _pb(self, r: Report) -> pb.Feedback:
        return codec.feedback_pb(r, self._clock(), self._retention_days)

    # ------------------------------------------------------------ reports
    async def CreateFeedback(self, request: pb.CreateFeedbackRequest, context) -> pb.Feedback:
        """Create one report; a retry returns the first one (Reports.create has the rules and errors).
        AUTHOR_AGENT needs the agent's credential in metadata `x-agentfeedback-actor`."""
        f = request.feedback
        body = domain.check_body(f.body)
        rid = parse_request_id(request.request_id, "request_id", required=True)
        kind = f.WhichOneof("target")
        if kind is None:
            raise InvalidArgument("feedback.target", "one of message, trace_id or coding is required")
        author = enum_value(f.author, Author, "feedback.author") or Author.USER
        if author == Author.PLATFORM:
            raise InvalidArgument("feedback.author", "AUTHOR_PLATFORM is set only by ReportSuspectedDefect")
        if f.context_trace_id and author != Author.AGENT:
            raise InvalidArgument("feedback.context_trace_id", "is only for AUTHOR_AGENT reports")
        actor = next((v for k, v in (context.invocation_metadata() or ()) if k == ACTOR_METADATA), None)
        if author == Author.AGENT:
            self._reports.check_agent_actor(actor)
        fingerprint = request_fingerprint(request)
        sentiment = enum_value(f.sentiment, Sentiment, "feedback.sentiment")
        category = enum_value(f.category, Category, "feedback.category")
        surface = enum_value(f.surface, Surface, "feedback.surface") or (
            Surface.CODING if kind == "coding" else Surface.CHAT)
        anchor = codec.anchor_from_pb(f)
        has_client = request.HasField("client_snapshot")
        client_version = check_text(request.client_snapshot.context.client_version if has_client else "",
                                    "client_snapshot.context.client_version", 200)
        draft = ReportDraft(rid, fingerprint, anchor, surface, author, body, sentiment, category, client_version,
                            codec.client_snapshot_from_pb(request.client_snapshot) if has_client else None, actor,
                            parse_trace_id(f.context_trace_id, "feedback.context_trace_id") if f.context_trace_id else "")
        return self._pb(await self._reports.create(current_principal(), draft))

    async def GetFeedback(self, request: pb.GetFeedbackRequest, context) -> pb.Feedback:
        """The caller's report `feedback/{id}`; NOT_FOUND when unknown or another owner's."""
        return self._pb(await self._reports.get(current_principal(), _feedback_id(request.name, "name")))

    async def ListFeedback(self, request: pb.ListFeedbackRequest, context) -> pb.ListFeedbackResponse:
        """The caller's reports, newest first, filtered; keyset page tokens on (create_time, id), bound
        to the filters. INVALID_ARGUMENT naming the field: a timestamp outside google.protobuf.Timestamp's
        range, start_time after end_time, a page_token issued for other filters."""
        size = page_size(request.page_size, 50, 1000)
        if request.instance:
            parse_name(request.instance, "instances/{}", "instance")
        f = ReportFilter(
            instance=request.instance, status=enum_value(request.status, Status, "status"),
            author=enum_value(request.author, Author, "author"),
            sentiment=enum_value(request.sentiment, Sentiment, "sentiment"),
            category=enum_value(request.category, Category, "category"),
            start_time=parse_timestamp(request.start_time, "start_time") if request.HasField("start_time") else None,
            end_time=parse_timestamp(request.end_time, "end_time") if request.HasField("end_time") else None,
            text=check_text(request.text, "text", 200),
            trace_id=parse_trace_id(request.trace_id, "trace_id") if request.trace_id else "",
        )
        if f.start_time and f.end_time and f.start_time > f.end_time:
            raise InvalidArgument("start_time", "must not be after end_time")
        pos = pages.read(request.page_token, codec.filters(f))
        after = (pages.page_token_time(pos.get("t")), page_token_text(pos.get("i"))) if pos else None
        got = await self._reports.list(current_principal(), f, after, size)
        items = [self._pb(r) for r in got[:size]]
        n = pages.fit(items)
        out = pb.ListFeedbackResponse(feedback=items[:n])
        if len(got) > n:
            last = got[n - 1]
            out.next_page_token = pages.issue({"t": last.create_time.isoformat(), "i": last.id}, codec.filters(f))
        return out

    async def UpdateFeedback(self, request: pb.UpdateFeedbackRequest, context) -> pb.Feedback:
        """Status / issue_url change with field mask + etag (see the proto for the errors)."""
        fid = _feedback_id(request.feedback.name, "feedback.name")
        paths = domain.check_update_mask(request.update_mask.paths)
        new = request.feedback
        status = enum_value(new.status, Status, "feedback.status", allow_zero=False) if "status" in paths else None
        rid = parse_request_id(request.request_id, "request_id")
        change = Change(new.etag, status, new.issue_url if "issue_url" in paths else None, rid,
                        codec.update_fingerprint(request) if rid is not None else None)
        action = audit.update_action(context.invocation_metadata())
        return self._pb(await self._reports.update(current_principal(), fid, change, self._pb, action))

    async def DeleteFeedback(self, request: pb.DeleteFeedbackRequest, context) -> empty_pb2.Empty:
        """Hard delete of the caller's report; NOT_FOUND when absent; a `request_id` retry is OK."""
        fid = _feedback_id(request.name, "name")
        await self._reports.delete(current_principal(), fid, parse_request_id(request.request_id, "request_id"))
        return empty_pb2.Empty()

    async def FileFeedback(self, request: pb.FileFeedbackRequest, context) -> pb.Feedback:
        """File the report's ticket once (Reports.file has the waits and errors)."""
        fid = _feedback_id(request.name, "name")
        parse_request_id(request.request_id, "request_id")
        return self._pb(await self._reports.file(current_principal(), fid))

    # ------------------------------------------------------------ ratings
    async def PutRating(self, request: pb.PutRatingRequest, context) -> pb.Rating:
        """Idempotent upsert / strict CAS of the caller's rating (see the proto)."""
        r = request.rating
        parse_name(r.conversation, "instances/{}", "rating.conversation")
        key = codec.rating_key(r)
        domain.check_rating(key, r.note, self._note_max)
        write = RatingWrite(enum_value(r.sentiment, RatingSentiment, "rating.sentiment"),
                            enum_value(r.category, Category, "rating.category"), r.note,
                            domain.rating_mask(request.update_mask.paths), "", check_reasons(r.reasons),
                            check_slug(r.choice, "rating.choice"))
        rid = parse_request_id(request.request_id, "request_id")
        fingerprint = request_fingerprint(request) if rid is not None else None
        version = parse_etag(r.etag, "rating.etag") if r.etag else None
        return codec.rating_pb(await self._ratings.put(current_principal(), key, write, version, r.etag, rid,
                                                       fingerprint))

    async def DeleteRating(self, request: pb.DeleteRatingRequest, context) -> empty_pb2.Empty:
        """Delete the caller's rating; deleting an absent (or foreign) rating succeeds and changes nothing."""
        (rid,) = parse_name(request.name, "ratings/{}", "name")
        await self._ratings.delete(current_principal(), rid)
        return empty_pb2.Empty()

    async def ListRatings(self, request: pb.ListRatingsRequest, context) -> pb.ListRatingsResponse:
        """The caller's ratings of one conversation (optionally one turn: INVALID_ARGUMENT when
        negative), by turn, scope, aspect; a page token is bound to its conversation and turn filter."""
        parse_name(request.conversation, "instances/{}", "conversation")
        size = page_size(request.page_size, 100, 1000)
        turn = request.turn_index if request.HasField("turn_index") else None
        if turn is not None and turn < 0:
            raise InvalidArgument("turn_index", "must be 0 or more (turns count from 0)")
        filters = {"conversation": request.conversation, "turn_index": turn}
        pos = pages.read(request.page_token, filters)
        after = codec.rating_position(pos) if pos is not None else None
        got = await self._ratings.list(current_principal(), request.conversation, turn, after, size)
        items = [codec.rating_pb(r) for r in got[:size]]
        n = pages.fit(items)
        out = pb.ListRatingsResponse(ratings=items[:n])
        if len(got) > n:
            k = got[n - 1].key
            out.next_page_token = pages.issue({"k": [k.turn_index, k.scope, k.aspect, k.artifact_id]}, filters)
        return out

    async def CopyRatings(self, request: pb.CopyRatingsRequest, context) -> pb.CopyRatingsResponse:
        """Copy the caller's ratings of turns ≤ through_turn_index onto a fork (Ratings.copy)."""
        parse_name(request.source_conversation, "instances/{}", "source_conversation")
        parse_name(request.target_conversation, "instances/{}", "target_conversation")
        if request.source_conversation == request.target_conversation:
            raise InvalidArgument("target_conversation", "must differ from source_conversation")
        if request.through_turn_index < 0:
            raise InvalidArgument("through_turn_index", "must not be negative")
        n = await self._ratings.copy(current_principal(), request.source_conversation, request.target_conversation,
                                     request.through_turn_index, parse_request_id(request.request_id, "request_id"))
        return pb.CopyRatingsResponse(copied_count=n)

    # ------------------------------------------------------------ change feed
    async def WatchFeedback(self, request: pb.WatchFeedbackRequest, context):
        """The change feed from a position (see the proto; Feed.start / Feed.watch have the rules)."""
        p = current_principal()
        f = self._feed.scoped(p, codec_feed.feed_filter(request), request.include_text)
        start = await self._feed.start(feed_domain.position(request.resume_token), request.from_oldest)
        async for item in self._feed.watch(p, f, start, request.include_text):
            yield codec_feed.watch_response(item, self._clock(), self._retention_days)

    # ------------------------------------------------------------ webhooks (feedback:admin)
    async def CreateWebhookSubscription(self, request: pb.CreateWebhookSubscriptionRequest, context
                                        ) -> pb.WebhookSubscription:
        """A subscription from now on; its secret in this answer only (Webhooks.create)."""
        w = request.webhook_subscription
        f = codec_feed.webhook_filter(w)
        rid = parse_request_id(request.request_id, "request_id")
        sub, secret = await self._webhooks.create(current_principal(), w.url, f, rid)
        return codec_feed.webhook_pb(sub, secret)

    async def ListWebhookSubscriptions(self, request: pb.ListWebhookSubscriptionsRequest, context
                                       ) -> pb.ListWebhookSubscriptionsResponse:
        """Every subscription, oldest first, keyset paged (secrets never)."""
        size = page_size(request.page_size, 50, 1000)
        pos = pages.read(request.page_token, {})
        after = (pages.page_token_time(pos.get("t")), page_token_text(pos.get("i"))) if pos else None
        got = await self._webhooks.list(after, size)
        out = pb.ListWebhookSubscriptionsResponse(webhook_subscriptions=[codec_feed.webhook_pb(w) for w in got[:size]])
        if len(got) > size:
            last = got[size - 1]
            out.next_page_token = pages.issue({"t": last.create_time.isoformat(), "i": last.id}, {})
        return out

    async def DeleteWebhookSubscription(self, request: pb.DeleteWebhookSubscriptionRequest, context
                                        ) -> empty_pb2.Empty:
        """Nothing more is sent; NOT_FOUND when absent."""
        (sid,) = parse_name(request.name, "webhookSubscriptions/{}", "name")
        await self._webhooks.delete(sid)
        return empty_pb2.Empty()

    async def ResumeWebhookSubscription(self, request: pb.ResumeWebhookSubscriptionRequest, context
                                        ) -> pb.WebhookSubscription:
        """DEAD_LETTERED → ACTIVE, retrying the event it stopped at; NOT_FOUND when absent."""
        (sid,) = parse_name(request.name, "webhookSubscriptions/{}", "name")
        return codec_feed.webhook_pb(await self._webhooks.resume(sid))

    async def ListWebhookDeliveries(self, request: pb.ListWebhookDeliveriesRequest, context
                                    ) -> pb.ListWebhookDeliveriesResponse:
        """The subscription's delivery attempts, newest first, keyset paged."""
        (sid,) = parse_name(request.parent, "webhookSubscriptions/{}", "parent")
        size = page_size(request.page_size, 50, 1000)
        filters = {"parent": request.parent}
        pos = pages.read(request.page_token, filters)
        before = page_token_int(pos.get("i"), 1, 2**63 - 1) if pos else None
        got = await self._webhooks.deliveries(sid, before, size)
        out = pb.ListWebhookDeliveriesResponse(deliveries=[codec_feed.delivery_pb(d) for d in got[:size]])
        if len(got) > size:
            out.next_page_token = pages.issue({"i": got[size - 1].id}, filters)
        return out
