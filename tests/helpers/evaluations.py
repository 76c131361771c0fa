"""Evaluations as other systems send them (issue 24): a real OpenTelemetry SDK (TracerProvider +
OTLP/gRPC exporter) under a foreign resource, emitting the OpenTelemetry GenAI `gen_ai.evaluation.result`
span event and the OpenInference annotation carrier span; the same event as a log record (LoggerProvider
+ the OTLP/gRPC or OTLP/HTTP log exporter, `event_name` set, in the evaluated span's context); and reads
of what became of them."""
from __future__ import annotations

import asyncio
import random

import asyncpg
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
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


def log_judge(port: int, transport: str, service_name: str = "llm-judge") -> LoggerProvider:
    """A logger provider exporting each record as it is emitted to the collector: `transport` grpc (the
    OTLP/gRPC port, LogsService/Export) or http (the OTLP/HTTP port, POST /v1/logs, gzip)."""
    exporter = (GrpcLogExporter(endpoint=f"127.0.0.1:{port}", insecure=True) if transport == "grpc" else
                HttpLogExporter(endpoint=f"http://127.0.0.1:{port}/v1/logs", compression=Compression.Gzip))
    lp = LoggerProvider(resource=Resource.create({"service.name": service_name}))
    lp.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    return lp


async def gen_ai_log_event(lp: LoggerProvider, trace_id: str, name: str, label: str = "",
                           score: float | None = None, explanation: str = "", old_sdk: bool = False) -> None:
    """One `gen_ai.evaluation.result` event as a log record, emitted in the context of (a span of) the
    evaluated trace, so the record carries its trace_id; `old_sdk`: named by the attribute `event.name`
    instead of `event_name` (exported off the event loop)."""
    await asyncio.to_thread(_gen_ai_log_event, lp, trace_id, name, label, score, explanation, old_sdk)


def _gen_ai_attributes(name: str, label: str, score: float | None, explanation: str,
                       response_id: str = "") -> dict[str, object]:
    """The `gen_ai.evaluation.result` event's attributes (semantic-conventions-genai events.yaml)."""
    attrs: dict[str, object] = {"gen_ai.evaluation.name": name}
    if label:
        attrs["gen_ai.evaluation.score.label"] = label
    if score is not None:
        attrs["gen_ai.evaluation.score.value"] = score
    if explanation:
        attrs["gen_ai.evaluation.explanation"] = explanation
    if response_id:
        attrs["gen_ai.response.id"] = response_id
    return attrs


def _gen_ai_log_event(lp: LoggerProvider, trace_id: str, name: str, label: str, score: float | None,
                      explanation: str, old_sdk: bool) -> None:
    attrs = _gen_ai_attributes(name, label, score, explanation)
    if old_sdk:
        attrs["event.name"] = "gen_ai.evaluation.result"
    ctx = trace.set_span_in_context(NonRecordingSpan(_rated(trace_id)))
    lp.get_logger("judge").emit(context=ctx, attributes=attrs,
                                event_name=None if old_sdk else "gen_ai.evaluation.result")


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
    attrs = _gen_ai_attributes(name, label, score, explanation, response_id)
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
