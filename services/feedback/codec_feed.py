"""Proto ↔ model of the change feed (WatchFeedback): the request's filter and each streamed response.
The reports and ratings inside are built by `codec.feedback_pb` / `codec.rating_pb`."""
from __future__ import annotations

import datetime as dt
import uuid

from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.common import pages
from services.common.errors import InvalidArgument, Violations
from services.common.ids import check_text, parse_name, parse_request_id
from services.feedback import codec, domain, feed_domain
from services.feedback.codec import enum_value
from services.feedback.model.enums import EventKind, RatingScope
from services.feedback.feed import FeedItem
from services.feedback.model.feed import FeedFilter
from services.feedback.model.webhooks import Delivery, WebhookSubscription


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


def create_webhook(request: pb.CreateWebhookSubscriptionRequest) -> tuple[str, FeedFilter, uuid.UUID | None]:
    """CreateWebhookSubscription: the URL (checked by Webhooks.create), the filters, the request_id."""
    v = Violations()
    f = v.check(webhook_filter, request.webhook_subscription)
    rid = v.check(parse_request_id, request.request_id, "request_id")
    v.raise_any()
    return request.webhook_subscription.url, f, rid


def subscription_id(name: str, field_path: str = "name") -> str:
    """`webhookSubscriptions/{id}` → id."""
    return parse_name(name, "webhookSubscriptions/{}", field_path)[0]


def list_deliveries(request: pb.ListWebhookDeliveriesRequest) -> tuple[str, int]:
    """ListWebhookDeliveries: the subscription (`parent`) and the page size."""
    v = Violations()
    sid = v.check(subscription_id, request.parent, "parent")
    size = v.check(pages.page_size, request.page_size, 50, 1000)
    v.raise_any()
    return sid, size


def delivery_position(pos: dict) -> int:
    return pages.page_token_int(pos.get("i"), 1, 2**63 - 1)


def delivery_pb(d: Delivery) -> pb.WebhookDelivery:
    out = pb.WebhookDelivery(event_id=d.event_id, attempt=d.attempt, outcome=d.outcome, http_status=d.http_status,
                             error=d.error, latency_ms=d.latency_ms)
    if d.time is not None:
        out.time.FromDatetime(d.time)
    return out
