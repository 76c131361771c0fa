"""OpenTelemetry bootstrap and logging shared by every service.

Each service gets its own `TracerProvider` (resource `service.name`), exporting over OTLP with the
SDK's standard exporter; endpoint, headers, timeouts and batching come from the standard `OTEL_*`
variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` = `grpc` |
`http/protobuf`, `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_TRACES_EXPORTER=none` / `OTEL_SDK_DISABLED=true`
to export nothing). A provider per service (not the global one) lets tests run several services in
one process with their own `service.name`.
"""
from __future__ import annotations

import json
import logging
import os
import sys

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter


def make_exporter() -> SpanExporter | None:
    """The OTLP span exporter the `OTEL_*` environment asks for, or None when exporting is off."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return None
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter  # noqa: PLC0415

        return OTLPSpanExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter  # noqa: PLC0415

        return HttpExporter()
    raise ValueError(f"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL={protocol!r}: use 'grpc' or 'http/protobuf'")


def setup_tracing(service_name: str, exporter: SpanExporter | None = None) -> TracerProvider:
    """A TracerProvider for one service. `exporter` overrides the environment (tests pass one)."""
    resource = Resource.create({"service.name": service_name, "service.namespace": "agentfeedback"})
    provider = TracerProvider(resource=resource)
    exp = exporter if exporter is not None else make_exporter()
    if exp is not None:
        provider.add_span_processor(BatchSpanProcessor(exp))
    return provider


class _TraceIdFilter(logging.Filter):
    """Puts the current trace_id/span_id on every log record (`-` outside a span)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        record.trace_id = format(ctx.trace_id, "032x") if ctx.is_valid else "-"
        record.span_id = format(ctx.span_id, "016x") if ctx.is_valid else "-"
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", "-"),
            "span_id": getattr(record, "span_id", "-"),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Root logging: text locally, JSON lines on stdout when deployed; trace ids on every record."""
    handler = logging.StreamHandler(sys.stdout if fmt == "json" else sys.stderr)
    handler.addFilter(_TraceIdFilter())
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(trace_id)s] %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
