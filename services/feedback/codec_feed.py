"""Proto ↔ model of the change feed (WatchFeedback): the request's filter and each streamed response.
The reports and ratings inside are built by `codec.feedback_pb` / `codec.rating_pb`."""
from __future__ import annotations

import datetime as dt
import uuid

from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.common import pages
from services.common.errors import InvalidArgument, Violations
from services.common.ids import check_text, parse_name, parse_request_id, parse_timestamp
from services.feedback import codec, domain, feed_domain
from services.feedback.codec import enum_value
from services.feedback.dataset import DatasetFilter, LabelledTurn, PreferencePair
from services.feedback.feed import FeedItem
from services.feedback.model.enums import AuthorKind, EventKind, RatingScope, RatingSentiment
from services.feedback.model.feed import FeedFilter, Position
from services.feedback.model.webhooks import Delivery, WebhookSubscription


def feed_filter(request: pb.WatchFeedbackRequest) -> FeedFilter:
    """The request's filters (INVALID_ARGUMENT naming `owner`, `kind`, `scope` or `aspect`)."""
    aspect = request.aspect
    if aspect and not domain.ASPECT_SLUG.match(aspect):
        raise InvalidArgument("aspect", "must be a slug [a-z][a-z0-9_]{0,63}")
    return FeedFilter(owner=check_text(request.owner, "owner", 256),
                      kind=enum_value(request.kind, EventKind, "kind"),
                      scope=enum_value(request.scope, RatingScope, "scope"), aspect=aspect)


def watch_feedback(request: pb.WatchFeedbackRequest) -> tuple[FeedFilter, Position | None]:
    """WatchFeedback: the filters and the position to resume after (None: no `resume_token`), one
    INVALID_ARGUMENT naming every bad field."""
    v = Violations()
    f = v.check(feed_filter, request)
    start = v.check(feed_domain.position, request.resume_token)
    v.raise_any()
    return f, start


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
    elif item.rating is not None or item.evaluation is not None:
        ev.rating.CopyFrom(codec.rating_pb(item.rating) if item.rating is not None
                           else codec.evaluation_rating_pb(item.evaluation))
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


_ROLES = {"ROLE_USER": "user", "ROLE_ASSISTANT": "assistant"}


def _aspect(value: str, field_path: str = "aspect") -> str:
    if value and not domain.ASPECT_SLUG.match(value):
        raise InvalidArgument(field_path, "must be a slug [a-z][a-z0-9_]{0,63}")
    return value


def _dataset_position(resume_token: str) -> tuple[str, int]:
    """Where an export resumes: after (conversation, turn); ("", -1) from the start. The token is
    signed and bound to the caller (`pages.read`, purpose DATASET_RESUME): INVALID_ARGUMENT naming
    `resume_token` when edited, foreign, unsigned (issued before tokens were signed) or another caller's."""
    pos = pages.read(resume_token, None, pages.DATASET_RESUME, "resume_token")
    if pos is None:
        return "", -1
    return (pages.page_token_text(pos.get("v"), "resume_token"),
            pages.page_token_int(pos.get("t"), 0, 2**31 - 1, "resume_token"))


def export_dataset(request: pb.ExportDatasetRequest) -> tuple[DatasetFilter, tuple[str, int]]:
    """ExportDataset: the filters and where to resume (one INVALID_ARGUMENT naming every bad field)."""
    v = Violations()
    if request.conversation:
        v.check(parse_name, request.conversation, "instances/{}", "conversation")
    aspect = v.check(_aspect, request.aspect)
    sentiment = v.check(enum_value, request.sentiment, RatingSentiment, "sentiment")
    author_kind = v.check(enum_value, request.author_kind, AuthorKind, "author_kind")
    start = v.check(parse_timestamp, request.start_time, "start_time") if request.HasField("start_time") else None
    end = v.check(parse_timestamp, request.end_time, "end_time") if request.HasField("end_time") else None
    if start and end and start > end:
        v.add("start_time", "must not be after end_time")
    after = v.check(_dataset_position, request.resume_token)
    v.raise_any()
    return DatasetFilter(request.conversation, aspect, sentiment, start, end, request.include_branch_copies,
                         author_kind), after


# A DatasetRecord's size bound: gRPC's default largest received message is 4 MiB (a bigger record would
# fail the client's stream, and a resumed export would meet the same record again); 1 MiB of room to spare.
RECORD_BUDGET_BYTES = 3 * 1024 * 1024
# The conversation before the turn takes at most this share of the bound (with the reply and tool calls),
# so a long conversation still leaves a third for the ratings, which are the record's labels.
MESSAGES_SHARE = 2 / 3


def _field_size(n: int) -> int:
    """Encoded bytes of a length-delimited field (tag number < 16) holding `n` bytes: tag, varint length, body."""
    return 1 + max(1, (n.bit_length() + 6) // 7) + n


def dataset_record(t: LabelledTurn, now: dt.datetime, retention_days: int) -> pb.DatasetRecord:
    """One labelled turn as a DatasetRecord, under RECORD_BUDGET_BYTES (exact encoded size): the
    conversation before the turn newest first while the record stays within MESSAGES_SHARE of the bound
    (the turn's own user message always; chat bounds it at 32,000 code points), the older messages
    counted in `messages_omitted`; the turn's tool calls once, from the frozen copy that holds the most;
    then its ratings and reports in order while the record fits (their counts in `ratings_total` /
    `feedback_total`)."""
    out = pb.DatasetRecord(conversation=t.conversation, turn_index=t.turn_index, trace_id=t.reply.trace_id,
                           reply_name=t.reply.name,
                           resume_token=pages.issue({"v": t.conversation, "t": t.turn_index}, None,
                                                                    pages.DATASET_RESUME),
                           ratings_total=len(t.ratings) + len(t.evaluations), feedback_total=len(t.reports))
    out.completion.role, out.completion.content = "assistant", t.reply.content
    reports = [codec.feedback_pb(r, now, retention_days) for r in t.reports]
    tool_calls = max((fb.trace_snapshot.tool_calls for fb in reports), key=len, default=())
    out.tool_calls.extend(tool_calls)
    size = out.ByteSize()
    # Newest first, so what a cut leaves out is the far past of the conversation, not the turn's context.
    messages: list[pb.DatasetMessage] = []
    room = RECORD_BUDGET_BYTES * MESSAGES_SHARE
    for m in reversed(t.prompt):
        msg = pb.DatasetMessage(role=_ROLES.get(m.role, "user"), content=m.content)
        n = _field_size(msg.ByteSize())
        if messages and size + n > room:
            break
        messages.append(msg)
        size += n
    out.messages.extend(reversed(messages))
    if omitted := len(t.prompt) - len(messages):
        out.messages_omitted = omitted
        size += 1 + max(1, (omitted.bit_length() + 6) // 7)  # field 13's tag and varint
    ratings = [*(codec.rating_pb(r) for r in t.ratings), *(codec.evaluation_rating_pb(e) for e in t.evaluations)]
    for field, items in ((out.ratings, ratings), (out.feedback, reports)):
        for x in items:
            size += _field_size(x.ByteSize())  # fields 7, 8
            if size > RECORD_BUDGET_BYTES:
                return out
            field.append(x)
    return out


def export_pairs(request: pb.ExportPreferencePairsRequest) -> str:
    """ExportPreferencePairs: the aspect filter."""
    v = Violations()
    aspect = v.check(_aspect, request.aspect)
    v.raise_any()
    return aspect


def pair_pb(x: PreferencePair) -> pb.PreferencePair:
    def msgs(ms):
        return [pb.DatasetMessage(role=_ROLES.get(m.role, "user"), content=m.content) for m in ms]

    return pb.PreferencePair(prompt=msgs(x.prompt), chosen=msgs(x.chosen), rejected=msgs(x.rejected), aspect=x.aspect,
                             chosen_conversation=x.chosen_conversation, rejected_conversation=x.rejected_conversation,
                             turn_index=x.turn_index, chosen_rating=codec.rating_pb(x.chosen_rating),
                             rejected_rating=codec.rating_pb(x.rejected_rating))
