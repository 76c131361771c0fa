"""Proto ↔ model for the feedback service: the one place `feedback_pb2` messages are built or read
into the model's dataclasses (`services/feedback/model/`); the servicer translates with these, nothing
else touches the protos. Each RPC's request is checked here in one call (the "requests" section).

Fields are copied directly (json_format is ~50× slower on the List paths). Request enums are read
with `enum_value`, which names the field on an unknown number (INVALID_ARGUMENT).
"""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict
from enum import IntEnum
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common import pages
from services.common.auth import ACTOR_METADATA
from services.common.errors import InvalidArgument, Violations
from services.common.etags import etag, parse_etag
from services.common.evaluation_rules import ACCEPT_EVALUATIONS_MAX, evaluation_problem
from services.common.ids import (
    check_text,
    parse_duration,
    parse_name,
    parse_request_id,
    parse_timestamp,
    parse_trace_id,
    request_fingerprint,
    timestamp_into,
)
from services.feedback import audit, domain
from services.feedback.judgements import check_reasons, check_slug
from services.feedback.workspace_freeze import check_component
from services.feedback.model.audit import AuditRecord
from services.feedback.model.enums import (
    Author,
    AuthorKind,
    Category,
    EvaluationConvention,
    RatingOrigin,
    RatingScope,
    RatingSentiment,
    Sentiment,
    SnapshotSource,
    Status,
    Surface,
    TraceState,
    member,
)
from services.feedback.model.evaluation import EvaluationIn, StoredEvaluation
from services.feedback.model.rating import Rating, RatingFilter, RatingKey, RatingPut, RatingWrite
from services.feedback.model.report import (
    Anchor,
    Change,
    Context,
    FrozenEvent,
    FrozenSpan,
    FrozenTrace,
    Report,
    ReportDraft,
    ReportFilter,
    Snapshot,
    ToolCall,
    TraceSnapshot,
)
from services.feedback.model.statistics import RecentFilter, Vocabulary, WindowStats

E = TypeVar("E", bound=IntEnum)


def enum_value(value: int, enum_type: type[E], field_path: str, allow_zero: bool = True) -> E:
    """A request's enum number as the model's member; INVALID_ARGUMENT naming `field_path` when the
    number is unknown (or 0 and `allow_zero` is False)."""
    try:
        got = member(enum_type, value)
    except ValueError:
        raise InvalidArgument(field_path, f"unknown value {value}") from None
    if value == 0 and not allow_zero:
        raise InvalidArgument(field_path, f"unknown value {value}")
    return got


def _ts(t: dt.datetime | None, into: Timestamp) -> None:
    if t is not None:
        timestamp_into(into, t)


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
    if s.component is not None:
        f, oc = s.component, out.component
        oc.scope, oc.artifact_id, oc.turn_index, oc.text, oc.text_clipped = (
            f.scope, f.artifact_id, f.turn_index, f.text, f.text_clipped)
        oc.title, oc.media_type, oc.version, oc.changed, oc.frozen = f.title, f.media_type, f.version, f.changed, f.frozen


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
    out.truncated_value_count = f.truncated_value_count
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
        etag=etag(r.version, r.id), context_trace_id=r.context_trace_id,
    )
    a = r.anchor
    if a.kind == "message":
        fb.message = a.message
    elif a.kind == "trace":
        fb.trace_id = a.trace_id
    else:
        fb.coding.session = a.coding_session
        fb.coding.timeline_seq = a.coding_seq
    _ts(r.turn_removed_time, fb.turn_removed_time)
    snapshot_into(r.snapshot, fb.snapshot)
    if r.snapshot.component is not None:  # what the report is about: kept with its frozen state
        fb.component.scope, fb.component.artifact_id = r.snapshot.component.scope, r.snapshot.component.artifact_id
    trace_into(r.trace, fb.trace_snapshot)
    fb.trace_snapshot.spans_expired = r.trace.spans_expired or domain.spans_expired(r.turn_time, now, retention_days)
    _ts(r.create_time, fb.create_time)
    _ts(r.update_time, fb.update_time)
    if r.claim is not None and r.claim.expire_time > now:
        fb.claim.claimant, fb.claim.session = r.claim.claimant, r.claim.session
        _ts(r.claim.expire_time, fb.claim.expire_time)
    return fb


def rating_pb(r: Rating) -> pb.Rating:
    k = r.key
    out = pb.Rating(
        name=r.name, conversation=k.conversation, turn_index=k.turn_index, user=r.owner, scope=k.scope,
        aspect=k.aspect, artifact_id=k.artifact_id, sentiment=r.sentiment, category=r.category, note=r.note,
        origin=r.origin, version=r.version, etag=etag(r.version, r.id), message=r.message, reasons=r.reasons,
        choice=r.choice, author_kind=AuthorKind.HUMAN,  # an owner's own (issue 24: others' are evaluations)
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
    for c in ws.evaluations:
        e_pb = out.evaluations.add(author_kind=c.author_kind, name=c.name, positive=c.positive, neutral=c.neutral,
                                   negative=c.negative, total=c.total)
        if c.mean_score is not None:
            e_pb.mean_score = c.mean_score
    return out


def evaluation_rating_pb(s: StoredEvaluation) -> pb.Rating:
    """An evaluation another system sent, as a rating with its author kind (`evaluations/{id}`; no etag:
    only its producer edits it, by sending it again)."""
    e, a = s.evaluation, s.anchor
    out = pb.Rating(
        name=s.name, conversation=a.conversation, turn_index=a.turn_index, user=a.owner, scope=e.scope,
        aspect=e.name, sentiment=s.sentiment, note=e.explanation, origin=pb.RATING_ORIGIN_USER, version=s.version,
        message=a.reply, author_kind=e.author_kind, evaluator=e.identifier, label=e.label,
    )
    if e.score is not None:
        out.score = e.score
    _ts(s.create_time, out.create_time)
    _ts(s.update_time, out.update_time)
    return out


def accept_evaluations(request: pb.AcceptEvaluationsRequest) -> list[EvaluationIn | str]:
    """AcceptEvaluations: 1..100 evaluations (else INVALID_ARGUMENT `evaluations`), each checked into the
    model or, when its shape is bad, the reason (`evaluations[i].field …`), rejected alone."""
    n = len(request.evaluations)
    if not 1 <= n <= ACCEPT_EVALUATIONS_MAX:
        raise InvalidArgument("evaluations", f"must hold 1 to {ACCEPT_EVALUATIONS_MAX} evaluations")
    out: list[EvaluationIn | str] = []
    for i, e in enumerate(request.evaluations):
        score = e.score if e.HasField("score") else None
        kind = AuthorKind(e.author_kind) if e.author_kind in (1, 2, 3) else None
        problem = evaluation_problem(e.trace_id, e.name, e.label, score, e.explanation, e.response_id,
                                            e.identifier, e.source, kind is not None)
        if problem:
            out.append(f"evaluations[{i}]: {problem}")
            continue
        convention = (EvaluationConvention(e.convention) if e.convention in EvaluationConvention._value2member_map_
                      else EvaluationConvention.UNSPECIFIED)
        out.append(EvaluationIn(e.trace_id, e.name, e.label, score, e.explanation, e.response_id, kind,
                                e.identifier, e.source, convention))
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
        truncated_value_count=t.truncated_value_count,
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
        context_trace_id=fb.context_trace_id,
    )


# ---------------------------------------------------------------- requests
# One function per RPC: the request checked into the model in one call. Every bad field is named:
# one INVALID_ARGUMENT whose BadRequest has a violation per field (errors.Violations), nothing
# written before it passes. Checks that need an earlier field's value run only once that one passed.
def feedback_id(name: str, field_path: str = "name") -> str:
    """`feedback/{id}` → id (INVALID_ARGUMENT naming `field_path` otherwise)."""
    return parse_name(name, "feedback/{}", field_path)[0]


def create_feedback(request: pb.CreateFeedbackRequest, actor: str | None) -> ReportDraft:
    """CreateFeedback: body, request_id (required), target (one of message / trace_id + instance /
    coding), author (not PLATFORM), context_trace_id (AUTHOR_AGENT only), sentiment, category, surface
    (default from the target), client_snapshot; status / issue_url are triage's, refused when set
    (`domain.check_triage_fields_unset`). `actor`: the `x-agentfeedback-actor` metadata value,
    checked by `Reports.create` for AUTHOR_AGENT."""
    f, v = request.feedback, Violations()
    body = v.check(domain.check_body, f.body)
    rid = v.check(parse_request_id, request.request_id, "request_id", required=True)
    kind = f.WhichOneof("target")
    if kind is None:
        v.add("feedback.target", "one of message, trace_id or coding is required")
    author = v.check(enum_value, f.author, Author, "feedback.author")
    if author == Author.PLATFORM:
        v.add("feedback.author", "AUTHOR_PLATFORM is set only by ReportSuspectedDefect")
    if f.context_trace_id and author != Author.AGENT:
        v.add("feedback.context_trace_id", "is only for AUTHOR_AGENT reports")
    sentiment = v.check(enum_value, f.sentiment, Sentiment, "feedback.sentiment")
    category = v.check(enum_value, f.category, Category, "feedback.category")
    surface = v.check(enum_value, f.surface, Surface, "feedback.surface")
    anchor = v.check(_anchor, f, kind) if kind is not None else None
    v.check(domain.check_triage_fields_unset, f.status, f.issue_url)
    has_client = request.HasField("client_snapshot")
    client_version = v.check(check_text, request.client_snapshot.context.client_version if has_client else "",
                             "client_snapshot.context.client_version", 200)
    client = v.check(_client_snapshot, request.client_snapshot) if has_client else None
    context_trace_id = v.check(parse_trace_id, f.context_trace_id, "feedback.context_trace_id") \
        if f.context_trace_id and author == Author.AGENT else ""
    component = None
    if f.HasField("component"):
        component = v.check(check_component, f.component.scope, f.component.artifact_id)
        if kind == "coding":
            v.add("feedback.component", "needs a message or trace_id target (a chat turn's workspace)")
    v.raise_any()
    return ReportDraft(rid, request_fingerprint(request), anchor, surface or (
        Surface.CODING if kind == "coding" else Surface.CHAT), author or Author.USER, body, sentiment, category,
        client_version, client, actor, context_trace_id, component)


def _anchor(f: pb.Feedback, kind: str) -> Anchor:
    if kind == "message":
        parse_name(f.message, "instances/{}/messages/{}", "feedback.message")
        instance = domain.instance_of(f.message)
        if f.instance and f.instance != instance:  # a contradiction is refused, not silently replaced
            raise InvalidArgument("feedback.instance", "contradicts feedback.message (the message is in "
                                  f"{instance}); leave it empty or send the message's instance")
        return Anchor("message", message=f.message, instance=instance)
    if kind == "trace_id":
        v = Violations()
        trace_id = v.check(parse_trace_id, f.trace_id, "feedback.trace_id")
        if not f.instance:
            v.add("feedback.instance", "is required with a trace_id target (the turn's instance)")
        else:
            v.check(parse_name, f.instance, "instances/{}", "feedback.instance")
        v.raise_any()
        return Anchor("trace", instance=f.instance, trace_id=trace_id)
    check_text(f.coding.session, "feedback.coding.session", 256, required=True)
    return Anchor("coding", coding_session=f.coding.session, coding_seq=f.coding.timeline_seq)


def _client_snapshot(s: pb.Snapshot) -> Snapshot:
    """CreateFeedback's `client_snapshot`, checked (NUL, target_time range) and clipped, source CLIENT."""
    return domain.client_snapshot(snapshot_from_pb(s, "client_snapshot"), "client_snapshot")


def list_feedback(request: pb.ListFeedbackRequest) -> tuple[ReportFilter, int]:
    """ListFeedback: the filters and the page size. A timestamp outside google.protobuf.Timestamp's
    range, start_time after end_time, an unknown enum, a bad instance / trace_id / text are named."""
    v = Violations()
    size = v.check(pages.page_size, request.page_size, 50, 1000)
    if request.instance:
        v.check(parse_name, request.instance, "instances/{}", "instance")
    status = v.check(enum_value, request.status, Status, "status")
    author = v.check(enum_value, request.author, Author, "author")
    sentiment = v.check(enum_value, request.sentiment, Sentiment, "sentiment")
    category = v.check(enum_value, request.category, Category, "category")
    start = v.check(parse_timestamp, request.start_time, "start_time") if request.HasField("start_time") else None
    end = v.check(parse_timestamp, request.end_time, "end_time") if request.HasField("end_time") else None
    text = v.check(check_text, request.text, "text", 200)
    trace_id = v.check(parse_trace_id, request.trace_id, "trace_id") if request.trace_id else ""
    if start and end and start > end:
        v.add("start_time", "must not be after end_time")
    v.raise_any()
    return ReportFilter(request.instance, status, author, sentiment, category, start, end, text, trace_id), size


def update_feedback(request: pb.UpdateFeedbackRequest, metadata: Iterable[tuple[str, str]] | None
                    ) -> tuple[str, Change]:
    """UpdateFeedback: the report's id and the change (the mask's fields only; `status` not 0); the
    audit action from the metadata (RESOLVE when the MCP server's `resolve_feedback` sent it)."""
    v, new = Violations(), request.feedback
    fid = v.check(feedback_id, new.name, "feedback.name")
    paths = v.check(domain.check_update_mask, request.update_mask.paths) or frozenset()
    status = v.check(enum_value, new.status, Status, "feedback.status", allow_zero=False) if "status" in paths else None
    rid = v.check(parse_request_id, request.request_id, "request_id")
    if new.etag:
        v.check(parse_etag, new.etag, "feedback.etag")
    session = v.check(_review_session, request.review_session)
    v.raise_any()
    return fid, Change(new.etag, status, new.issue_url if "issue_url" in paths else None, rid,
                       _update_fingerprint(request) if rid is not None else None, audit.update_action(metadata),
                       next((v for k, v in (metadata or ()) if k == ACTOR_METADATA), None), session or "")


def _update_fingerprint(request: pb.UpdateFeedbackRequest) -> bytes:
    """ids.request_fingerprint without `feedback.etag` (a precondition, not content: a retry may carry
    the etag it re-read)."""
    copy = pb.UpdateFeedbackRequest()
    copy.CopyFrom(request)
    copy.feedback.etag = ""
    return request_fingerprint(copy)


def name_and_request_id(request: pb.DeleteFeedbackRequest | pb.FileFeedbackRequest
                        ) -> tuple[str, uuid.UUID | None]:
    """DeleteFeedback / FileFeedback: the report's id (`name`) and the optional request_id."""
    v = Violations()
    fid = v.check(feedback_id, request.name)
    rid = v.check(parse_request_id, request.request_id, "request_id")
    v.raise_any()
    return fid, rid


def file_feedback(request: pb.FileFeedbackRequest) -> tuple[str, str]:
    """FileFeedback: the report's id (`name`) and the caller's review session ('' when none)."""
    v = Violations()
    fid = v.check(feedback_id, request.name)
    v.check(parse_request_id, request.request_id, "request_id")
    session = v.check(_review_session, request.review_session)
    v.raise_any()
    return fid, session or ""


# ClaimFeedback's lease: default and bounds (seconds).
CLAIM_TTL_DEFAULT_S, CLAIM_TTL_MIN_S, CLAIM_TTL_MAX_S = 300.0, 1.0, 1800.0


def _session(session: str, field: str = "session") -> str:
    if not 1 <= len(session) <= 64 or not all(" " < c <= "~" for c in session):
        raise InvalidArgument(field, "must be 1 to 64 printable ASCII characters (no spaces)")
    return session


def _review_session(session: str) -> str:
    """UpdateFeedback / FileFeedback `review_session`: optional, else as ClaimFeedback's `session`."""
    return _session(session, "review_session") if session else ""


def _ttl(request: pb.ClaimFeedbackRequest) -> float:
    """ClaimFeedback `ttl` in seconds: unset → CLAIM_TTL_DEFAULT_S; a Duration that is not valid
    (`parse_duration`) or outside CLAIM_TTL_MIN_S..CLAIM_TTL_MAX_S → InvalidArgument naming `ttl`."""
    if not request.HasField("ttl"):
        return CLAIM_TTL_DEFAULT_S
    s = parse_duration(request.ttl, "ttl").total_seconds()
    if not CLAIM_TTL_MIN_S <= s <= CLAIM_TTL_MAX_S:
        raise InvalidArgument("ttl", f"must be {CLAIM_TTL_MIN_S:.0f} s to {CLAIM_TTL_MAX_S / 60:.0f} min")
    return s


def claim_feedback(request: pb.ClaimFeedbackRequest) -> tuple[str, str, float]:
    """ClaimFeedback: the report's id (`name`), the session (1..64 printable ASCII) and the lease in
    seconds (`ttl`, 1 s .. 30 min, default 5 min)."""
    v = Violations()
    fid = v.check(feedback_id, request.name)
    session = v.check(_session, request.session)
    ttl = v.check(_ttl, request)
    v.raise_any()
    return fid, session, ttl


def release_feedback(request: pb.ReleaseFeedbackRequest) -> tuple[str, str]:
    """ReleaseFeedback: the report's id (`name`) and the session holding it."""
    v = Violations()
    fid = v.check(feedback_id, request.name)
    session = v.check(_session, request.session)
    v.raise_any()
    return fid, session


def put_rating(request: pb.PutRatingRequest, note_max_bytes: int) -> RatingPut:
    """PutRating: the key (conversation, turn_index ≥ 0, scope set, aspect a slug, artifact_id for
    ARTIFACT only), note (≤ `note_max_bytes` UTF-8 bytes), sentiment, category, reasons, choice, the
    update mask, the etag and the request_id.

    Every put parses once, its checks called directly; only a request one of them refuses is parsed
    again through `Violations`, so its one INVALID_ARGUMENT names every bad field (the checks are pure:
    the same answer twice). `Violations.check` on each of the nine checks cost ≈ 3 µs a put (issue 29)."""
    try:
        return _put_rating(request, note_max_bytes, _call)
    except InvalidArgument:
        v = Violations()
        put = _put_rating(request, note_max_bytes, v.check)
        v.raise_any()
        return put


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """A check called directly: its InvalidArgument propagates (the first bad field ends the parse)."""
    return fn(*args)


def _put_rating(request: pb.PutRatingRequest, note_max_bytes: int, check: Callable[..., Any]) -> RatingPut:
    """`put_rating`'s one parse; `check(fn, *args)` runs each check (`_call`, or `Violations.check`,
    which records a refusal and answers None so every bad field is named)."""
    r = request.rating
    check(parse_name, r.conversation, "instances/{}", "rating.conversation")
    scope = check(enum_value, r.scope, RatingScope, "rating.scope")
    key = RatingKey(r.conversation, r.turn_index, scope, r.aspect, r.artifact_id) if scope is not None else None
    if key is not None:
        check(domain.check_rating, key, r.note, note_max_bytes)
    write = RatingWrite(check(enum_value, r.sentiment, RatingSentiment, "rating.sentiment"),
                        check(enum_value, r.category, Category, "rating.category"), r.note,
                        check(domain.rating_mask, request.update_mask.paths), "", check(check_reasons, r.reasons),
                        check(check_slug, r.choice, "rating.choice"))
    rid = check(parse_request_id, request.request_id, "request_id")
    version = check(parse_etag, r.etag, "rating.etag") if r.etag else None
    return RatingPut(key, write, version, r.etag, rid, request_fingerprint(request) if rid is not None else None)


def rating_id(request: pb.DeleteRatingRequest) -> str:
    """DeleteRating: `ratings/{id}` → id."""
    return parse_name(request.name, "ratings/{}", "name")[0]


EVERY_CONVERSATION = "instances/-"


def list_ratings(request: pb.ListRatingsRequest) -> tuple[str, int | None, RatingFilter, int]:
    """ListRatings: the conversation (`instances/-`: every one of the caller's), the turn filter (None:
    every turn; negative, or with `instances/-` → INVALID_ARGUMENT), the filters and the page size."""
    v = Violations()
    every = request.conversation == EVERY_CONVERSATION
    if not every:
        v.check(parse_name, request.conversation, "instances/{}", "conversation")
    size = v.check(pages.page_size, request.page_size, 100, 1000)
    turn = request.turn_index if request.HasField("turn_index") else None
    if turn is not None and turn < 0:
        v.add("turn_index", "must be 0 or more (turns count from 0)")
    elif turn is not None and every:
        v.add("turn_index", f"names a turn of one conversation, not of {EVERY_CONVERSATION}")
    f = RatingFilter(
        sentiment=v.check(enum_value, request.sentiment, RatingSentiment, "sentiment"),
        reason=v.check(check_slug, request.reason, "reason"),
        start_time=v.check(parse_timestamp, request.start_time, "start_time") if request.HasField("start_time") else None,
        origin=v.check(enum_value, request.origin, RatingOrigin, "origin"))
    v.raise_any()
    return request.conversation, turn, f, size


def rating_position(pos: dict[str, Any]) -> tuple[int, int, str, str]:
    """A ListRatings page token's keyset (turn_index int4, scope smallint, aspect, artifact_id), each
    checked before it reaches SQL (INVALID_ARGUMENT naming `page_token` otherwise)."""
    k = pos.get("k")
    if not (isinstance(k, list) and len(k) == 4):
        raise InvalidArgument(pages.FIELD, pages.NOT_OURS)
    return (pages.page_token_int(k[0], -(2**31), 2**31 - 1), pages.page_token_int(k[1], 0, 2**15 - 1),
            pages.page_token_text(k[2]), pages.page_token_text(k[3]))


def rating_position_key(r: Rating) -> dict[str, Any]:
    k = r.key
    return {"k": [k.turn_index, k.scope, k.aspect, k.artifact_id]}


def rating_filters(conversation: str, turn: int | None, f: RatingFilter) -> dict[str, Any]:
    """What a ListRatings page token is bound to: every filter of the request (those not applied left
    out, so a token issued before the filters existed still reads the same request)."""
    more = {"sentiment": int(f.sentiment), "reason": f.reason,
            "start_time": f.start_time.isoformat() if f.start_time else None, "origin": int(f.origin)}
    return {"conversation": conversation, "turn_index": turn, **{k: v for k, v in more.items() if v}}


NOTE_TURNS_MAX = 100


def turns_removed(request: pb.NoteTurnsRemovedRequest) -> tuple[str, str, list[tuple[int, int]], list[str]]:
    """NoteTurnsRemoved: the owner (required, ≤ 256 characters), the conversation, its removed turn
    ranges (first, last; inclusive): one per `turn_indexes` entry (≤ NOTE_TURNS_MAX, each ≥ 0), or
    (0, through_turn_index); the removed turns' trace ids (≤ NOTE_TURNS_MAX)."""
    v = Violations()
    owner = v.check(check_text, request.owner, "owner", 256, required=True)
    v.check(parse_name, request.conversation, "instances/{}", "conversation")
    indexes = list(request.turn_indexes)
    through = request.through_turn_index if request.HasField("through_turn_index") else None
    if (not indexes) == (through is None):
        v.add("turn_indexes", "give either turn_indexes (DeleteTurn) or through_turn_index (ClearMessages)")
    if len(indexes) > NOTE_TURNS_MAX:
        v.add("turn_indexes", f"names {len(indexes)} turns; the limit is {NOTE_TURNS_MAX}")
    if any(i < 0 for i in indexes):
        v.add("turn_indexes", "must not be negative")
    if through is not None and through < 0:
        v.add("through_turn_index", "must not be negative")
    if len(request.trace_ids) > NOTE_TURNS_MAX:
        v.add("trace_ids", f"names {len(request.trace_ids)} traces; the limit is {NOTE_TURNS_MAX}")
    else:
        for i, t in enumerate(request.trace_ids):
            v.check(parse_trace_id, t, f"trace_ids[{i}]")
    v.raise_any()
    ranges = [(i, i) for i in sorted(set(indexes))] if indexes else [(0, through)]
    return owner, request.conversation, ranges, sorted(set(request.trace_ids))


def copy_ratings(request: pb.CopyRatingsRequest) -> tuple[str, str, int, uuid.UUID | None]:
    """CopyRatings: source, target (another conversation), through_turn_index (≥ 0), request_id."""
    v = Violations()
    v.check(parse_name, request.source_conversation, "instances/{}", "source_conversation")
    v.check(parse_name, request.target_conversation, "instances/{}", "target_conversation")
    if request.source_conversation == request.target_conversation:
        v.add("target_conversation", "must differ from source_conversation")
    if request.through_turn_index < 0:
        v.add("through_turn_index", "must not be negative")
    rid = v.check(parse_request_id, request.request_id, "request_id")
    v.raise_any()
    return request.source_conversation, request.target_conversation, request.through_turn_index, rid


def stats_words(request: pb.GetFeedbackStatsRequest) -> Vocabulary:
    """GetFeedbackStats' words (each '' → the taxonomy's default, else a slug)."""
    v = Violations()
    words = [v.check(check_slug, getattr(request, k), k) or getattr(Vocabulary, k)
             for k in ("reaction_aspect", "completion_aspect", "complete_choice")]
    v.raise_any()
    return Vocabulary(*words)


def list_recent(r: pb.ListRecentFeedbackRequest) -> tuple[RecentFilter, int]:
    """ListRecentFeedback: the filters (unknown enums, a non-slug aspect / reason / choice, a bad
    `text` are named) and the page size."""
    v = Violations()
    size = v.check(pages.page_size, r.page_size, 50, 500)
    if r.aspect and not domain.ASPECT_SLUG.match(r.aspect):
        v.add("aspect", "must be a slug [a-z][a-z0-9_]{0,63}")
    f = RecentFilter(
        scope=v.check(enum_value, r.scope, RatingScope, "scope"), aspect=r.aspect,
        sentiment=v.check(enum_value, r.sentiment, RatingSentiment, "sentiment"),
        category=v.check(enum_value, r.category, Category, "category"), text=v.check(check_text, r.text, "text", 200),
        negative_only=r.negative_only, reason=v.check(check_slug, r.reason, "reason"),
        choice=v.check(check_slug, r.choice, "choice"), reports_only=r.reports_only,
    )
    v.raise_any()
    return f, size


COUNT_CONVERSATIONS_MAX = 100


def count_conversations(r: pb.CountConversationFeedbackRequest) -> list[str]:
    """CountConversationFeedback: 1..100 names `instances/{id}` (INVALID_ARGUMENT naming `conversations`
    or the first bad `conversations[i]`)."""
    v = Violations()
    if not r.conversations:
        v.add("conversations", "must name at least one conversation")
    elif len(r.conversations) > COUNT_CONVERSATIONS_MAX:
        v.add("conversations", f"names {len(r.conversations)} conversations; the limit is {COUNT_CONVERSATIONS_MAX}")
    else:
        for i, name in enumerate(r.conversations):
            if v.check(parse_name, name, "instances/{}", f"conversations[{i}]") is None:
                break
    v.raise_any()
    return list(r.conversations)


def turn_feedback(request: pb.GetTurnFeedbackRequest) -> tuple[str, int, str]:
    """GetTurnFeedback: the conversation, the turn (≥ 0) and the user (required)."""
    v = Violations()
    v.check(parse_name, request.conversation, "instances/{}", "conversation")
    if request.turn_index < 0:
        v.add("turn_index", "must not be negative")
    user = v.check(check_text, request.user, "user", 256, required=True)
    v.raise_any()
    return request.conversation, request.turn_index, user


def list_audit(request: pb.ListAuditRecordsRequest) -> tuple[str, int]:
    """ListAuditRecords: the report filter ('' = every report the caller may see) and the page size."""
    v = Violations()
    size = v.check(pages.page_size, request.page_size, 50, 1000)
    fid = v.check(feedback_id, request.feedback, "feedback") if request.feedback else ""
    v.raise_any()
    return fid, size


def report_defect(request: pb.ReportSuspectedDefectRequest) -> tuple[str, Anchor, uuid.UUID, bytes]:
    """ReportSuspectedDefect: the defect's name (`instances/{i}/suspectedDefects/{trace_id}`), the
    anchor it names (its turn's trace), the request_id (required) and the request's fingerprint."""
    v = Violations()
    rid = v.check(parse_request_id, request.request_id, "request_id", required=True)
    anchor = v.check(_defect_anchor, request.suspected_defect)
    v.raise_any()
    return request.suspected_defect, anchor, rid, request_fingerprint(request)


def _defect_anchor(name: str) -> Anchor:
    instance_id, trace_id = parse_name(name, "instances/{}/suspectedDefects/{}", "suspected_defect")
    return Anchor("trace", instance=f"instances/{instance_id}", trace_id=parse_trace_id(trace_id, "suspected_defect"))


def filters(f: ReportFilter | RecentFilter) -> dict[str, Any]:
    """A list call's filters as the JSON-able mapping its page tokens are bound to."""
    return asdict(f)


def audit_pb(r: AuditRecord) -> pb.AuditRecord:
    e = r.entry
    out = pb.AuditRecord(name=f"auditRecords/{r.id}", actor=e.actor, action=e.action, feedback=f"feedback/{e.feedback_id}",
                         owner=e.owner, method=e.method)
    out.time.FromDatetime(r.time)
    for f, old, new in e.changes:
        out.changes.add(field=f, old_value=old, new_value=new)
    return out
