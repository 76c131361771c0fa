"""Proto ↔ model for the feedback service: the one place `feedback_pb2` messages are built or read
into `model.py` dataclasses (the servicer translates with these; nothing else touches the protos).

Fields are copied directly (json_format is ~50× slower on the List paths). Request enums are read
with `enum_value`, which names the field on an unknown number (INVALID_ARGUMENT).
"""
from __future__ import annotations

import datetime as dt
from enum import IntEnum
from dataclasses import asdict
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.errors import InvalidArgument
from services.common import pages
from services.common.ids import (
    check_text,
    page_token_int,
    page_token_text,
    parse_name,
    parse_timestamp,
    parse_trace_id,
    request_fingerprint,
)
from services.feedback import domain
from services.feedback.judgements import check_slug
from services.feedback.statistics import WindowStats
from services.feedback.model import (
    Anchor,
    Author,
    Category,
    Context,
    FrozenEvent,
    FrozenSpan,
    FrozenTrace,
    Rating,
    RatingKey,
    RecentFilter,
    ReportFilter,
    RatingScope,
    RatingSentiment,
    Report,
    Sentiment,
    Snapshot,
    SnapshotSource,
    Status,
    Surface,
    ToolCall,
    TraceSnapshot,
    TraceState,
)

E = TypeVar("E", bound=IntEnum)


def enum_value(value: int, enum_type: type[E], field_path: str, allow_zero: bool = True) -> E:
    """A request's enum number as the model's member; INVALID_ARGUMENT naming `field_path` when the
    number is unknown (or 0 and `allow_zero` is False)."""
    try:
        member = enum_type(value)
    except ValueError:
        raise InvalidArgument(field_path, f"unknown value {value}") from None
    if value == 0 and not allow_zero:
        raise InvalidArgument(field_path, f"unknown value {value}")
    return member


def _ts(t: dt.datetime | None, into: Timestamp) -> None:
    if t is not None:
        into.FromDatetime(t)


def _dt(t: Timestamp, present: bool, field_path: str = "time") -> dt.datetime | None:
    """A Timestamp within google.protobuf.Timestamp's range (INVALID_ARGUMENT naming the field otherwise)."""
    return parse_timestamp(t, field_path) if present else None


# ---------------------------------------------------------------- model → proto
def snapshot_into(s: Snapshot, out: pb.Snapshot) -> None:
    out.source = s.source
    out.target_role = s.target_role
    out.target_text = s.target_text
    out.target_text_clipped = s.target_text_clipped
    _ts(s.target_time, out.target_time)
    out.preceding_user_text = s.preceding_user_text
    out.preceding_user_text_clipped = s.preceding_user_text_clipped
    out.trace_id = s.trace_id
    out.turn_index = s.turn_index
    c, oc = s.context, out.context
    oc.agent, oc.model, oc.audio_key, oc.dictation = c.agent, c.model, c.audio_key, c.dictation
    oc.client_version, oc.channel = c.client_version, c.channel
    out.unverified = s.unverified


def trace_into(t: TraceSnapshot, out: pb.TraceSnapshot) -> None:
    f = t.frozen
    out.state = t.state
    out.attempts = t.attempts
    _ts(t.capture_time, out.capture_time)
    _ts(t.next_attempt_time, out.next_attempt_time)
    out.spans_expired = t.spans_expired
    out.root_status = f.root_status
    out.duration_ms = f.duration_ms
    out.missing.extend(f.missing)
    for c in f.tool_calls:
        out.tool_calls.add(name=c.name, call_id=c.call_id, status=c.status, duration_ms=c.duration_ms,
                           arguments=c.arguments, result=c.result, result_size_bytes=c.result_size_bytes,
                           span_id=c.span_id)
    for s in f.spans:
        out.spans.add(span_id=s.span_id, parent_span_id=s.parent_span_id, name=s.name, service_name=s.service_name,
                      status=s.status, duration_ms=s.duration_ms, start_offset_ms=s.start_offset_ms)
    for e in f.events:
        ev = out.events.add(name=e.name, span_id=e.span_id)
        _ts(e.time, ev.time)
        if e.attributes:
            ev.attributes.update(e.attributes)


def feedback_pb(r: Report, now: dt.datetime, retention_days: int) -> pb.Feedback:
    """A report as the API's Feedback; `spans_expired` as of `now` (the collector keeps spans
    `retention_days` days)."""
    fb = pb.Feedback(
        name=r.name, owner=r.owner, instance=r.anchor.instance, surface=r.surface, author=r.author, body=r.body,
        sentiment=r.sentiment, category=r.category, status=r.status, issue_url=r.issue_url,
        etag=domain.etag(r.version), context_trace_id=r.context_trace_id,
    )
    a = r.anchor
    if a.kind == "message":
        fb.message = a.message
    elif a.kind == "trace":
        fb.trace_id = a.trace_id
    else:
        fb.coding.session = a.coding_session
        fb.coding.timeline_seq = a.coding_seq
    snapshot_into(r.snapshot, fb.snapshot)
    trace_into(r.trace, fb.trace_snapshot)
    fb.trace_snapshot.spans_expired = r.trace.spans_expired or domain.spans_expired(r.turn_time, now, retention_days)
    _ts(r.create_time, fb.create_time)
    _ts(r.update_time, fb.update_time)
    return fb


def rating_pb(r: Rating) -> pb.Rating:
    k = r.key
    out = pb.Rating(
        name=r.name, conversation=k.conversation, turn_index=k.turn_index, user=r.owner, scope=k.scope,
        aspect=k.aspect, artifact_id=k.artifact_id, sentiment=r.sentiment, category=r.category, note=r.note,
        origin=r.origin, version=r.version, etag=domain.etag(r.version), message=r.message, reasons=r.reasons,
        choice=r.choice,
    )
    _ts(r.create_time, out.create_time)
    _ts(r.update_time, out.update_time)
    return out


def stats_pb(ws: WindowStats) -> pb.FeedbackStats:
    """Totals count every rating of the window, including ratings without a sentiment (a note only)."""
    st = ws.base
    out = pb.FeedbackStats(total_ratings=st.total_ratings, negative_ratings=st.negative_ratings,
                           total_reports=st.total_reports)
    for a in st.aspects:
        out.aspects.add(scope=a.scope, aspect=a.aspect, positive=a.positive, neutral=a.neutral, negative=a.negative)
    for category, count in st.categories:
        out.categories.add(category=category, count=count)
    for d in st.trend:
        out.trend.add(day=d.day.isoformat(), positive=d.positive, neutral=d.neutral, negative=d.negative,
                      reports=d.reports)
    f = ws.funnel
    out.headline.likes, out.headline.dislikes = ws.likes, ws.dislikes
    out.headline.reports, out.headline.tasks_completed = st.total_reports, f.complete
    for dim in ws.dimensions:
        a = dim.count
        d_pb = out.dimensions.add(scope=a.scope, aspect=a.aspect, positive=a.positive, neutral=a.neutral,
                                  negative=a.negative)
        for d in dim.daily:
            d_pb.daily.add(day=d.day.isoformat(), positive=d.positive, neutral=d.neutral, negative=d.negative)
    out.funnel.engaged, out.funnel.with_completion_answer, out.funnel.marked_complete = (
        f.engaged, f.answered, f.complete)
    for choice, n in f.latest_state:
        out.funnel.latest_state.add(choice=choice, count=n)
    out.window_days = ws.window_days
    _ts(ws.end_time, out.end_time)
    return out


# ---------------------------------------------------------------- proto → model
def snapshot_from_pb(s: pb.Snapshot, field_path: str = "snapshot") -> Snapshot:
    c = s.context
    return Snapshot(
        source=SnapshotSource(s.source) if s.source in SnapshotSource._value2member_map_ else SnapshotSource.NONE,
        target_role=s.target_role, target_text=s.target_text, target_text_clipped=s.target_text_clipped,
        target_time=_dt(s.target_time, s.HasField("target_time"), f"{field_path}.target_time"),
        preceding_user_text=s.preceding_user_text,
        preceding_user_text_clipped=s.preceding_user_text_clipped, trace_id=s.trace_id, turn_index=s.turn_index,
        context=Context(agent=c.agent, model=c.model, audio_key=c.audio_key, dictation=c.dictation,
                        client_version=c.client_version, channel=c.channel),
        unverified=s.unverified,
    )


def client_snapshot_from_pb(s: pb.Snapshot) -> Snapshot:
    """CreateFeedback's `client_snapshot`, checked (NUL, target_time range) and clipped, source CLIENT."""
    return domain.client_snapshot(snapshot_from_pb(s, "client_snapshot"), "client_snapshot")


def trace_from_pb(t: pb.TraceSnapshot) -> TraceSnapshot:
    frozen = FrozenTrace(
        tool_calls=tuple(ToolCall(name=c.name, call_id=c.call_id, status=c.status, duration_ms=c.duration_ms,
                                  arguments=c.arguments, result=c.result, result_size_bytes=c.result_size_bytes,
                                  span_id=c.span_id) for c in t.tool_calls),
        events=tuple(FrozenEvent(name=e.name, time=_dt(e.time, e.HasField("time")), span_id=e.span_id,
                                 attributes=json_format.MessageToDict(e.attributes)) for e in t.events),
        spans=tuple(FrozenSpan(span_id=s.span_id, parent_span_id=s.parent_span_id, name=s.name,
                               service_name=s.service_name, status=s.status, duration_ms=s.duration_ms,
                               start_offset_ms=s.start_offset_ms) for s in t.spans),
        root_status=t.root_status, duration_ms=t.duration_ms, missing=tuple(t.missing),
    )
    return TraceSnapshot(state=TraceState(t.state), frozen=frozen, attempts=t.attempts,
                         capture_time=_dt(t.capture_time, t.HasField("capture_time")),
                         next_attempt_time=_dt(t.next_attempt_time, t.HasField("next_attempt_time")),
                         spans_expired=t.spans_expired)


def report_from_pb(fb: pb.Feedback) -> Report:
    """A Feedback read back into the model (the CLI renders its evidence bundle from it)."""
    kind = {"trace_id": "trace", None: "message"}.get(fb.WhichOneof("target"), fb.WhichOneof("target") or "message")
    anchor = Anchor(kind=kind, message=fb.message, instance=fb.instance, trace_id=fb.trace_id,
                    coding_session=fb.coding.session, coding_seq=fb.coding.timeline_seq)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return Report(
        id=fb.name.removeprefix("feedback/"), owner=fb.owner, anchor=anchor, surface=Surface(fb.surface),
        author=Author(fb.author), body=fb.body, sentiment=Sentiment(fb.sentiment), category=Category(fb.category),
        snapshot=snapshot_from_pb(fb.snapshot), trace=trace_from_pb(fb.trace_snapshot), status=Status(fb.status),
        issue_url=fb.issue_url, version=0,
        create_time=_dt(fb.create_time, fb.HasField("create_time")) or epoch,
        update_time=_dt(fb.update_time, fb.HasField("update_time")) or epoch,
    )


def rating_key(r: pb.Rating) -> RatingKey:
    """PutRating's key (the scope checked: INVALID_ARGUMENT `rating.scope` on an unknown number)."""
    return RatingKey(r.conversation, r.turn_index, enum_value(r.scope, RatingScope, "rating.scope"), r.aspect,
                     r.artifact_id)


# ---------------------------------------------------------------- requests
def anchor_from_pb(f: pb.Feedback) -> Anchor:
    kind = f.WhichOneof("target")
    if kind == "message":
        parse_name(f.message, "instances/{}/messages/{}", "feedback.message")
        return Anchor("message", message=f.message, instance=domain.instance_of(f.message))
    if kind == "trace_id":
        trace_id = parse_trace_id(f.trace_id, "feedback.trace_id")
        if not f.instance:
            raise InvalidArgument("feedback.instance", "is required with a trace_id target (the turn's instance)")
        parse_name(f.instance, "instances/{}", "feedback.instance")
        return Anchor("trace", instance=f.instance, trace_id=trace_id)
    check_text(f.coding.session, "feedback.coding.session", 256, required=True)
    return Anchor("coding", coding_session=f.coding.session, coding_seq=f.coding.timeline_seq)


def update_fingerprint(request: pb.UpdateFeedbackRequest) -> bytes:
    """ids.request_fingerprint without `feedback.etag` (a precondition, not content: a retry may carry
    the etag it re-read)."""
    copy = pb.UpdateFeedbackRequest()
    copy.CopyFrom(request)
    copy.feedback.etag = ""
    return request_fingerprint(copy)


def rating_position(pos: dict[str, Any]) -> tuple[int, int, str, str]:
    """A ListRatings page token's keyset (turn_index int4, scope smallint, aspect, artifact_id), each
    checked before it reaches SQL (INVALID_ARGUMENT naming `page_token` otherwise)."""
    k = pos.get("k")
    if not (isinstance(k, list) and len(k) == 4):
        raise InvalidArgument("page_token", pages.NOT_OURS)
    return (page_token_int(k[0], -(2**31), 2**31 - 1), page_token_int(k[1], 0, 2**15 - 1),
            page_token_text(k[2]), page_token_text(k[3]))


def recent_filter(r: pb.ListRecentFeedbackRequest) -> RecentFilter:
    """ListRecentFeedback's filters; INVALID_ARGUMENT naming an unknown enum or a bad `text`."""
    return RecentFilter(
        scope=enum_value(r.scope, RatingScope, "scope"), aspect=r.aspect,
        sentiment=enum_value(r.sentiment, RatingSentiment, "sentiment"),
        category=enum_value(r.category, Category, "category"), text=check_text(r.text, "text", 200),
        negative_only=r.negative_only, reason=check_slug(r.reason, "reason"), choice=check_slug(r.choice, "choice"),
    )


def filters(f: ReportFilter | RecentFilter) -> dict[str, Any]:
    """A list call's filters as the JSON-able mapping its page tokens are bound to."""
    return asdict(f)
