"""Proto ↔ model of the change feed (WatchFeedback): the request's filter and each streamed response.
The reports and ratings inside are built by `codec.feedback_pb` / `codec.rating_pb`."""
from __future__ import annotations

import datetime as dt

from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.common.errors import InvalidArgument
from services.common.ids import check_text
from services.feedback import codec, domain, feed_domain
from services.feedback.codec import enum_value
from services.feedback.enums import EventKind, RatingScope
from services.feedback.feed import FeedItem
from services.feedback.model_feed import FeedFilter
from services.feedback.model_webhooks import Delivery, WebhookSubscription


def feed_filter(request: pb.WatchFeedbackRequest) -> FeedFilter:
    """The request's filters (INVALID_ARGUMENT naming `owner`, `kind`, `scope` or `aspect`)."""
    aspect = request.aspect
    if aspect and not domain.ASPECT_SLUG.match(aspect):
        raise InvalidArgument("aspect", "must be a slug [a-z][a-z0-9_]{0,63}")
    return FeedFilter(owner=check_text(request.owner, "owner", 256),
                      kind=enum_value(request.kind, EventKind, "kind"),
                      scope=enum_value(request.scope, RatingScope, "scope"), aspect=aspect)


def _omit_words(fb: pb.Feedback) -> None:
    """Leave out what the owner wrote or said: the body, the quoted turn, tool calls' arguments and results."""
    fb.body = ""
    fb.snapshot.target_text = ""
    fb.snapshot.preceding_user_text = ""
    for call in fb.trace_snapshot.tool_calls:
        call.arguments = ""
        call.result = ""


def watch_response(item: FeedItem, now: dt.datetime, retention_days: int) -> pb.WatchFeedbackResponse:
    out = pb.WatchFeedbackResponse(resume_token=feed_domain.token(item.position))
    e = item.event
    if e is None:
        out.heartbeat_time.FromDatetime(item.heartbeat_time or now)
        return out
    ev = out.event
    ev.id, ev.type, ev.kind, ev.name, ev.owner = e.id, e.type, e.kind, e.name, e.owner
    ev.resume_token, ev.branch_copy = out.resume_token, e.branch_copy
    ev.change_time.FromDatetime(e.change_time)
    if item.report is not None:
        ev.feedback.CopyFrom(codec.feedback_pb(item.report, now, retention_days))
        if not item.with_text:
            _omit_words(ev.feedback)
            ev.text_omitted = True
    elif item.rating is not None:
        ev.rating.CopyFrom(codec.rating_pb(item.rating))
        if not item.with_text:
            ev.rating.note = ""
            ev.text_omitted = True
    return out


def webhook_pb(s: WebhookSubscription, secret: str = "") -> pb.WebhookSubscription:
    f = s.filter
    out = pb.WebhookSubscription(name=s.name, url=s.url, owner=f.owner, kind=f.kind, scope=f.scope, aspect=f.aspect,
                                 secret=secret, state=s.state, creator=s.creator,
                                 delivered_event_id=s.delivered_event, failed_attempts=s.attempts)
    out.create_time.FromDatetime(s.create_time)
    if s.attempts:
        out.next_attempt_time.FromDatetime(s.next_attempt_at)
    return out


def webhook_filter(s: pb.WebhookSubscription) -> FeedFilter:
    """The subscription's filters (INVALID_ARGUMENT naming `webhook_subscription.<field>`)."""
    req = pb.WatchFeedbackRequest(owner=s.owner, kind=s.kind, scope=s.scope, aspect=s.aspect)
    try:
        return feed_filter(req)
    except InvalidArgument as e:
        raise InvalidArgument(f"webhook_subscription.{e.field_path}", e.description) from None


def delivery_pb(d: Delivery) -> pb.WebhookDelivery:
    out = pb.WebhookDelivery(event_id=d.event_id, attempt=d.attempt, outcome=d.outcome, http_status=d.http_status,
                             error=d.error, latency_ms=d.latency_ms)
    if d.time is not None:
        out.time.FromDatetime(d.time)
    return out
