"""Every rating written and every report made, in the two shapes LLM observability tools read (issue 24).

One carrier span `feedback.evaluation` per judgement, a child of the RPC that wrote it (or of the capture
pass that verified a report), with one span link to the rated turn and both conventions on it:

- OpenTelemetry GenAI `gen_ai.evaluation.result`, as a span event (semantic-conventions-genai
  `model/gen-ai/events.yaml` and `docs/gen-ai/gen-ai-events.md`, stability "development"):
  `gen_ai.evaluation.name` (required) = the rating's aspect (`report` for a report),
  `gen_ai.evaluation.score.label` (conditionally required) = the choice, else the sentiment
  (`positive` / `neutral` / `negative`; a report's `good` / `bad`), `gen_ai.evaluation.score.value`
  (conditionally required: "if applicable") = the sentiment as a number (+1 / 0 / −1), and
  `gen_ai.response.id` = the rated message (the spec: "helps correlate the evaluation event with the
  corresponding operation when span id is not available"). The event "SHOULD be parented to GenAI
  operation span being evaluated when possible": the turn's own spans are another trace, so the carrier
  links to it instead.
- OpenInference annotations (Arize-ai/openinference `spec/annotations.md`): flattened
  `annotations.0.annotation.{name,label,score,annotator_kind,identifier}`, `openinference.span.kind` =
  `EVALUATOR` (`spec/semantic_conventions.md`); `annotator_kind` `HUMAN` for what an owner said (their
  rating, their report — also one the agent recorded for them), `CODE` for the platform's (a suspected
  defect's report); `identifier` = the rating's key ("stable producer-assigned ID for results with the
  same name and target"), the report's name for a report.

The link: `SpanContext(trace id of the turn, span id of its root span when known)`. A rating does not
know the root span's id (the chat service does not keep it), so its link carries the trace id and span id
0 with the attribute `feedback.link = rated_turn`: OpenTelemetry records links with an invalid span
context when they have attributes, and trace backends resolve them by trace id.

Privacy as everywhere else in telemetry: no owner's words (no `explanation`: a note or a body is the
owner's; no metadata), only ids, slugs and numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

from openinference.semconv.trace import (
    AnnotationAttributes,
    OpenInferenceAnnotatorKindValues,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags

from services.common import span_pipe
from services.feedback.model.enums import Author, RatingScope, RatingSentiment, Sentiment
from services.feedback.model.rating import Rating
from services.feedback.model.report import CreatedEvent

CARRIER_SPAN = "feedback.evaluation"
EVENT = "gen_ai.evaluation.result"
# OpenTelemetry GenAI attribute names (semantic-conventions-genai, registry `gen_ai`).
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
# `annotations.0.annotation.*` (OpenInference spec/annotations.md: zero-based, contiguous).
_ANNOTATION = f"{SpanAttributes.ANNOTATIONS}.0."
REPORT_NAME = "report"
_RATING_SCORES = {RatingSentiment.POSITIVE: 1.0, RatingSentiment.NEUTRAL: 0.0, RatingSentiment.NEGATIVE: -1.0}
_REPORT_SCORES = {Sentiment.GOOD: 1.0, Sentiment.BAD: -1.0}


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One judgement, as both conventions carry it."""

    name: str
    label: str
    score: float | None
    annotator_kind: str
    identifier: str
    response_id: str
    trace_id: str
    turn_span_id: str = ""


# Enum names as the labels carry them, looked up once (an enum's `.name` costs about 1 µs a read; one per put).
_SENTIMENT_LABELS = {s: s.name.lower() for s in RatingSentiment}
_SCOPE_NAMES = {s: s.name.lower() for s in RatingScope}
_HUMAN = OpenInferenceAnnotatorKindValues.HUMAN.value


def rating_fields(r: Rating, trace_id: str) -> tuple[str, int, int, str, str, int, str, str, str]:
    """What a rating's Evaluation is made of (`of_rating_fields`): (conversation, turn index, scope
    number, aspect, artifact id, sentiment number, choice, rated message, turn trace id), plain values
    (cheap to pickle: an IntEnum pickles through a Python `__reduce_ex__`)."""
    k = r.key
    return (k.conversation, k.turn_index, k.scope._value_, k.aspect, k.artifact_id, r.sentiment._value_, r.choice,
            r.message, trace_id)


def of_rating_fields(conversation: str, turn_index: int, scope: int, aspect: str, artifact_id: str, sentiment: int,
                     choice: str, message: str, trace_id: str) -> Evaluation:
    """A rating (an owner's: HUMAN) from `rating_fields`, identified by its key."""
    sentiment = RatingSentiment(sentiment)
    label = choice or (_SENTIMENT_LABELS[sentiment] if sentiment else "")
    return Evaluation(aspect, label, _RATING_SCORES.get(sentiment), _HUMAN,
                      f"{conversation}/turns/{turn_index}/{_SCOPE_NAMES[RatingScope(scope)]}/{aspect}/{artifact_id}",
                      message, trace_id)


def of_rating(r: Rating, trace_id: str) -> Evaluation:
    """A rating (an owner's: HUMAN), identified by its key."""
    return of_rating_fields(*rating_fields(r, trace_id))


def of_report(r: CreatedEvent) -> Evaluation:
    """A report: CODE when the platform made it (a suspected defect), else HUMAN (the owner's complaint)."""
    kind = OpenInferenceAnnotatorKindValues.CODE if r.author == Author.PLATFORM else OpenInferenceAnnotatorKindValues.HUMAN
    label = r.sentiment.name.lower() if r.sentiment else r.category.name.lower()
    return Evaluation(REPORT_NAME, label, _REPORT_SCORES.get(r.sentiment), kind.value, f"feedback/{r.id}", r.message,
                      r.trace_id)


def attributes(e: Evaluation) -> tuple[dict[str, object], dict[str, object]]:
    """(the carrier span's attributes, the `gen_ai.evaluation.result` event's attributes)."""
    span: dict[str, object] = {
        SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.EVALUATOR.value,
        _ANNOTATION + AnnotationAttributes.ANNOTATION_NAME: e.name,
        _ANNOTATION + AnnotationAttributes.ANNOTATION_ANNOTATOR_KIND: e.annotator_kind,
        _ANNOTATION + AnnotationAttributes.ANNOTATION_IDENTIFIER: e.identifier,
    }
    event: dict[str, object] = {GEN_AI_EVALUATION_NAME: e.name}
    if e.label:
        span[_ANNOTATION + AnnotationAttributes.ANNOTATION_LABEL] = e.label
        event[GEN_AI_EVALUATION_SCORE_LABEL] = e.label
    if e.score is not None:
        span[_ANNOTATION + AnnotationAttributes.ANNOTATION_SCORE] = e.score
        event[GEN_AI_EVALUATION_SCORE_VALUE] = e.score
    if e.response_id:
        event[GEN_AI_RESPONSE_ID] = e.response_id
    return span, event


_LINK_ATTRIBUTES = {"feedback.link": "rated_turn"}
# `span_pipe.record_deferred`'s builders of the carrier (run in the export child).
_BUILDER = f"{__name__}:carrier"
_RATING_BUILDER = f"{__name__}:rating_carrier"


def _links(e: Evaluation) -> list[Link]:
    if not e.trace_id:
        return []
    ctx = SpanContext(trace_id=int(e.trace_id, 16), span_id=int(e.turn_span_id, 16) if e.turn_span_id else 0,
                      is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return [Link(ctx, _LINK_ATTRIBUTES)]


def carrier(*fields: object) -> tuple[str, SpanKind, dict, list, list]:
    """The carrier span of the Evaluation whose fields (in their order) `emit` sent, as
    `span_pipe.record_deferred` builders return it: (name, kind, attributes, [(event name, attributes)],
    [(link SpanContext tuple, attributes)]). Run by the export child."""
    return _carrier(Evaluation(*fields))


def rating_carrier(*fields: object) -> tuple[str, SpanKind, dict, list, list]:
    """`carrier` of the rating whose `rating_fields` `emit_rating` sent. Run by the export child."""
    return _carrier(of_rating_fields(*fields))


def _carrier(e: Evaluation) -> tuple[str, SpanKind, dict, list, list]:
    span_attrs, event_attrs = attributes(e)
    links = [((ln.context.trace_id, ln.context.span_id, True, TraceFlags.SAMPLED), dict(ln.attributes))
             for ln in _links(e)]
    return CARRIER_SPAN, SpanKind.INTERNAL, span_attrs, [(EVENT, event_attrs)], links


def emit(tracer: trace.Tracer, e: Evaluation) -> None:
    """The carrier span (see the module docstring), ended at once. Every OpenInference annotation needs a
    result: a judgement with neither label nor score (a rating holding only a note) is not emitted.

    When the span pipe can take it directly, only the judgement's fields leave this process and the
    export child builds the span (`carrier`; the same span either way, tests/unit/test_evaluation_events.py):
    its attributes, event and link were ≈ 10 % of a rating put's instructions here (issue 29)."""
    if not e.label and e.score is None:
        return
    if span_pipe.record_deferred(tracer, _BUILDER, (e.name, e.label, e.score, e.annotator_kind, e.identifier,
                                                    e.response_id, e.trace_id, e.turn_span_id)):
        return
    span_attrs, event_attrs = attributes(e)
    span_pipe.record_span(tracer, CARRIER_SPAN, SpanKind.INTERNAL, span_attrs, _links(e), [(EVENT, event_attrs)])


def emit_rating(tracer: trace.Tracer, r: Rating, trace_id: str) -> None:
    """`emit(tracer, of_rating(r, trace_id))`, the rating's Evaluation made by the export child when the
    span pipe can take the span directly (only `rating_fields` leave this process: issue 29, a put's
    hot path). A rating with neither choice nor sentiment (a note alone) has neither label nor score:
    not emitted, as `emit` decides."""
    if not r.choice and not r.sentiment:
        return
    if not span_pipe.record_deferred(tracer, _RATING_BUILDER, rating_fields(r, trace_id)):
        emit(tracer, of_rating(r, trace_id))
