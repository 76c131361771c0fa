"""Evaluations as other systems send them (issue 24): a real OpenTelemetry SDK (TracerProvider +
OTLP/gRPC exporter) under a foreign resource, emitting the OpenTelemetry GenAI `gen_ai.evaluation.result`
span event and the OpenInference annotation carrier span; and reads of what became of them."""
from __future__ import annotations

import asyncio
import random

import asyncpg
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

from services.common.auth import SCOPE_FEEDBACK_ADMIN
from tests.stack import Stack


def judge(otlp_port: int, service_name: str = "llm-judge", namespace: str = "") -> TracerProvider:
    """A provider exporting each span at its end over OTLP/gRPC to the collector's `otlp_port`."""
    attrs = {"service.name": service_name} | ({"service.namespace": namespace} if namespace else {})
    tp = TracerProvider(resource=Resource.create(attrs))
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{otlp_port}", insecure=True)))
    return tp


def _rated(trace_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), random.getrandbits(64) or 1, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


async def gen_ai_event(tp: TracerProvider, trace_id: str, name: str, label: str = "", score: float | None = None,
                       explanation: str = "", response_id: str = "") -> None:
    """A span parented to the evaluated turn's span carrying one `gen_ai.evaluation.result` event
    (exported off the event loop, which the in-process collector needs to answer)."""
    await asyncio.to_thread(_gen_ai_event, tp, trace_id, name, label, score, explanation, response_id)


def _gen_ai_event(tp: TracerProvider, trace_id: str, name: str, label: str, score: float | None,
                  explanation: str, response_id: str) -> None:
    attrs: dict[str, object] = {"gen_ai.evaluation.name": name}
    if label:
        attrs["gen_ai.evaluation.score.label"] = label
    if score is not None:
        attrs["gen_ai.evaluation.score.value"] = score
    if explanation:
        attrs["gen_ai.evaluation.explanation"] = explanation
    if response_id:
        attrs["gen_ai.response.id"] = response_id
    ctx = trace.set_span_in_context(NonRecordingSpan(_rated(trace_id)))
    with tp.get_tracer("judge").start_as_current_span("evaluate", context=ctx) as span:
        span.add_event("gen_ai.evaluation.result", attrs)


async def annotation(tp: TracerProvider, trace_id: str, name: str, *, label: str = "", score: float | None = None,
                     kind: str = "LLM", identifier: str = "", explanation: str = "") -> None:
    """An OpenInference carrier span (a trace of its own) with one link to the rated turn's span
    (exported off the event loop)."""
    await asyncio.to_thread(_annotation, tp, trace_id, name, label, score, kind, identifier, explanation)


def _annotation(tp: TracerProvider, trace_id: str, name: str, label: str, score: float | None, kind: str,
                identifier: str, explanation: str) -> None:
    a: dict[str, object] = {"openinference.span.kind": "EVALUATOR", "annotations.0.annotation.name": name,
                            "annotations.0.annotation.annotator_kind": kind}
    for k, v in (("label", label), ("identifier", identifier), ("explanation", explanation)):
        if v:
            a[f"annotations.0.annotation.{k}"] = v
    if score is not None:
        a["annotations.0.annotation.score"] = score
    tp.get_tracer("judge").start_span("annotation", context=trace.set_span_in_context(trace.INVALID_SPAN),
                                      attributes=a, links=[Link(_rated(trace_id))]).end()


async def turn_evaluations(stack: Stack, conversation: str, turn_index: int, user: str = "alice") -> list[pb.Rating]:
    got = await stack.feedback().GetTurnFeedback(
        pb.GetTurnFeedbackRequest(conversation=conversation, turn_index=turn_index, user=user),
        metadata=stack.md("operator", (SCOPE_FEEDBACK_ADMIN,)))
    return list(got.evaluations)


async def outbox(database_url: str) -> list[asyncpg.Record]:
    """The collector's undelivered evaluations (its `traces.evaluation_outbox` table)."""
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch("SELECT key, attempts, last_outcome FROM traces.evaluation_outbox")
    finally:
        await conn.close()
