"""A `feedback.evaluation` carrier span the serving process sends as its judgement's fields
(`span_pipe.record_deferred`) is, once the export child built it (`span_pipe.expand`), the tuple the SDK's
span would have made: attributes, event, link, parent, flags, trace state, scope and limits."""
from __future__ import annotations

import datetime as dt

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from services.common import span_pipe
from services.common.span_export_worker import _expanded
from services.common.span_pipe import DEFERRED, ProcessSpanProcessor, compact, expand
from services.common.telemetry import SPAN_LIMITS
from services.feedback.evaluation_events import (
    CARRIER_SPAN,
    Evaluation,
    emit,
    emit_rating,
    of_rating,
    of_rating_fields,
    rating_fields,
)
from services.feedback.model.enums import Category, RatingOrigin, RatingScope, RatingSentiment
from services.feedback.model.rating import Rating, RatingKey

_PARENT = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED),
                      trace_state=TraceState([("vendor", "v1")]))
_EVALUATIONS = [
    Evaluation("accuracy", "negative", -1.0, "HUMAN", "conversations/c/turns/1/message/accuracy/", "m1", "ab" * 16),
    Evaluation("report", "bad", -1.0, "CODE", "feedback/f1", "m2", "cd" * 16, "ef" * 8),
    Evaluation("tone", "formal", None, "HUMAN", "conversations/c/turns/2/message/tone/", "", ""),  # no link
]


def _captured(sampler=None, limits=SPAN_LIMITS) -> tuple[TracerProvider, list]:
    """A provider whose only processor is a ProcessSpanProcessor that keeps what it is given (no child);
    an SDK span's tuple (its on_end) is marked `("sdk", tuple)`."""
    got: list = []
    proc = ProcessSpanProcessor.__new__(ProcessSpanProcessor)
    proc.put = got.append
    proc.on_end = lambda span: got.append(("sdk", compact(span)))
    tp = TracerProvider(span_limits=limits, shutdown_on_exit=False, **({"sampler": sampler} if sampler else {}))
    tp.add_span_processor(proc)
    return tp, got


def _without_ids_and_times(rec: tuple) -> tuple:
    name, ctx, parent, kind, _start, _end, attrs, events, *rest = rec
    return (name, (ctx[0], *ctx[2:]), parent, kind, attrs, [(n, a) for n, _t, a in events], *rest)


def _both_ways(monkeypatch, tp, got, e) -> dict[bool, tuple]:
    recs = {}
    for direct in (True, False):
        monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
        with otel_trace.use_span(NonRecordingSpan(_PARENT)):
            emit(tp.get_tracer("agentfeedback.feedback", "1.0"), e)
        (rec,) = got
        got.clear()
        recs[direct] = rec
    return recs


def test_a_deferred_carrier_is_built_by_the_export_child_as_the_sdk_span(monkeypatch):
    tp, got = _captured()
    for e in _EVALUATIONS:
        recs = _both_ways(monkeypatch, tp, got, e)
        assert recs[True][0] is DEFERRED and recs[False][0] == "sdk"
        (built,) = _expanded([recs[True]], "feedback")
        sdk = recs[False][1]
        assert built[0] == CARRIER_SPAN and built[1][1] != sdk[1][1]  # each its own span id
        assert _without_ids_and_times(built) == _without_ids_and_times(sdk), e
        assert built[2][:2] == (0xABC, 0xDEF) and built[1][4] == (("vendor", "v1"),)
        assert built[4] <= built[7][0][1] <= built[5]  # start <= event <= end
        assert len(built[9]) == (1 if e.trace_id else 0)
        assert expand(built) is built  # a whole record passes as it is


def test_a_deferred_carrier_keeps_the_limits_the_sdk_applies(monkeypatch):
    tight = SpanLimits(max_attribute_length=8, max_span_attributes=2, max_events=0, max_event_attributes=1,
                       max_links=0, max_link_attributes=0)
    tp, got = _captured(limits=tight)
    recs = _both_ways(monkeypatch, tp, got, _EVALUATIONS[1])
    (built,) = _expanded([recs[True]], "feedback")
    assert _without_ids_and_times(built) == _without_ids_and_times(recs[False][1])
    assert built[6][1] > 0 and built[8] == 1 and built[7] == []  # attributes and the event dropped, counted


def test_a_carrier_the_sampler_may_judge_by_its_content_is_made_by_the_sdk(monkeypatch):
    # A root span's delegate here is the ratio sampler (asked with the span's name, attributes, links);
    # under a sampled remote parent it is ALWAYS_ON, which asks nothing of the span.
    tp, got = _captured(ParentBased(TraceIdRatioBased(1.0)))
    monkeypatch.setattr(span_pipe, "DIRECT_SPANS", True)
    emit(tp.get_tracer("agentfeedback.feedback"), _EVALUATIONS[0])
    with otel_trace.use_span(NonRecordingSpan(_PARENT)):
        emit(tp.get_tracer("agentfeedback.feedback"), _EVALUATIONS[0])
    assert [rec[0] for rec in got] == [CARRIER_SPAN, DEFERRED]  # queued whole by record_span, then deferred
    tp, got = _captured(ParentBased(ALWAYS_OFF))
    emit(tp.get_tracer("agentfeedback.feedback"), _EVALUATIONS[0])
    assert got == []  # not sampled: nothing queued


def test_the_export_child_drops_a_deferred_record_it_cannot_build_and_keeps_the_others(caplog):
    tp, got = _captured()
    emit(tp.get_tracer("agentfeedback.feedback"), _EVALUATIONS[0])
    bad = (DEFERRED, "services.feedback.evaluation_events:no_such_builder", *got[0][2:])
    out = _expanded([bad, got[0]], "feedback")
    assert [r[0] for r in out] == [CARRIER_SPAN]
    assert "could not be built" in caplog.text


def _rating(scope: RatingScope, sentiment: RatingSentiment, choice: str = "", artifact_id: str = "",
            message: str = "m1") -> Rating:
    t = dt.datetime(2026, 12, 5, tzinfo=dt.timezone.utc)
    return Rating("r1", RatingKey("conversations/c", 3, scope, "accuracy", artifact_id), "o", sentiment,
                  Category.UNSPECIFIED, "a note", RatingOrigin.UNSPECIFIED, message, 1, t, t, (), choice)


_RATINGS = [
    _rating(RatingScope.MESSAGE, RatingSentiment.NEGATIVE),
    _rating(RatingScope.MESSAGE, RatingSentiment.POSITIVE, message=""),
    _rating(RatingScope.ARTIFACT, RatingSentiment.NEUTRAL, artifact_id="7"),
    _rating(RatingScope.CONVERSATION, RatingSentiment.UNSPECIFIED, choice="formal"),
    _rating(RatingScope.PLAN, RatingSentiment.POSITIVE, choice="ok"),
]


def test_a_rating_sent_as_its_fields_is_the_carrier_the_sdk_makes_of_its_evaluation(monkeypatch):
    # emit_rating sends `rating_fields` (the export child makes the Evaluation): the same span as
    # emit(of_rating(...)) through the SDK, with or without the turn's trace id.
    tp, got = _captured()
    tracer = tp.get_tracer("agentfeedback.feedback", "1.0")
    for r in _RATINGS:
        for trace_id in ("ab" * 16, ""):
            assert of_rating_fields(*rating_fields(r, trace_id)) == of_rating(r, trace_id)
            monkeypatch.setattr(span_pipe, "DIRECT_SPANS", True)
            with otel_trace.use_span(NonRecordingSpan(_PARENT)):
                emit_rating(tracer, r, trace_id)
            monkeypatch.setattr(span_pipe, "DIRECT_SPANS", False)
            with otel_trace.use_span(NonRecordingSpan(_PARENT)):
                emit(tracer, of_rating(r, trace_id))
            deferred, (sdk_mark, sdk) = got
            got.clear()
            assert deferred[0] is DEFERRED and sdk_mark == "sdk"
            assert all(type(f) in (str, int) for f in deferred[-1])  # plain values leave the process
            (built,) = _expanded([deferred], "feedback")
            assert _without_ids_and_times(built) == _without_ids_and_times(sdk), (r, trace_id)
            assert len(built[9]) == (1 if trace_id else 0)


def test_a_rating_with_neither_choice_nor_sentiment_is_not_emitted_either_way(monkeypatch):
    tp, got = _captured()
    tracer = tp.get_tracer("agentfeedback.feedback")
    note_only = _rating(RatingScope.MESSAGE, RatingSentiment.UNSPECIFIED)
    for direct in (True, False):
        monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
        with otel_trace.use_span(NonRecordingSpan(_PARENT)):
            emit_rating(tracer, note_only, "ab" * 16)
            emit(tracer, of_rating(note_only, "ab" * 16))
    assert got == []


def test_a_rating_whose_carrier_cannot_be_deferred_is_made_by_the_sdk(monkeypatch):
    # A root span under a ratio sampler: record_deferred refuses, emit_rating falls back to emit.
    tp, got = _captured(ParentBased(TraceIdRatioBased(1.0)))
    monkeypatch.setattr(span_pipe, "DIRECT_SPANS", True)
    emit_rating(tp.get_tracer("agentfeedback.feedback"), _RATINGS[0], "ab" * 16)
    assert [rec[0] for rec in got] == [CARRIER_SPAN]
