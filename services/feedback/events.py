"""The `feedback.created` span event on a report's turn trace (docs/architecture.md "The life of a report":
each new report is also an OTel span event on the turn's trace — ids, sentiment, category; never the body).

One emitter for both places that know a row's trace id is authoritative: CreateFeedback (snapshot
from the chat service) and the capture worker (a CLIENT snapshot the chat service has just verified).
Whether a row's event was emitted lives in the database (`feedback.created_event_time`, set by the
statement that makes the trace id authoritative), so the callers emit only when that statement says so.
"""
from __future__ import annotations

import random

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from services.feedback import evaluation_events
from services.feedback.model.report import CreatedEvent


def emit_created(tracer: trace.Tracer, r: CreatedEvent) -> None:
    """Span `feedback.create` in trace `r.trace_id` (32 hex) carrying the event `feedback.created`
    with attributes feedback.id / sentiment / category / author (proto enum names) / target.message /
    instance — never the body. Its parent is a remote SpanContext built from the trace id with a random span id (the
    turn's own span ids are not known here), sampled; when called inside a span (the CreateFeedback
    server span) it links to it so both traces lead to each other. No-op without a trace id.
    Then the report's `gen_ai.evaluation.result` / OpenInference carrier span (evaluation_events)."""
    if not r.trace_id:
        return
    parent = SpanContext(trace_id=int(r.trace_id, 16), span_id=random.getrandbits(64) or 1, is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
    current = trace.get_current_span().get_span_context()
    attrs = {
        "feedback.id": r.id, "feedback.sentiment": f"SENTIMENT_{r.sentiment.name}",
        "feedback.category": f"CATEGORY_{r.category.name}", "feedback.author": f"AUTHOR_{r.author.name}",
        "feedback.target.message": r.message, "feedback.instance": r.instance,
    }
    span = tracer.start_span("feedback.create", context=trace.set_span_in_context(NonRecordingSpan(parent)),
                             kind=SpanKind.INTERNAL, links=[Link(current)] if current.is_valid else None)
    span.add_event("feedback.created", attrs)
    span.end()
    evaluation_events.emit(tracer, evaluation_events.of_report(r))
