"""OpenTelemetry bootstrap and logging shared by every service.

Each service gets its own `TracerProvider` (resource `service.name`), exporting over OTLP with the
SDK's standard exporter; endpoint, headers, timeouts and batching come from the standard `OTEL_*`
variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` = `grpc` |
`http/protobuf`, `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_TRACES_EXPORTER=none` / `OTEL_SDK_DISABLED=true`
to export nothing). A provider per service (not the global one) lets tests run several services in
one process with their own `service.name`.

Span hygiene (issue 16: one caller's oversized values must never cost another caller's spans):
- `SPAN_LIMITS`: every provider caps attribute values at 2048 characters (the SDK truncates longer
  ones), 64 attributes per span, 16 events × 8 attributes, 8 links × 8 attributes. Worst case per span,
  protobuf-encoded (a character is at most 4 UTF-8 bytes; key + framing ≤ 256 bytes per attribute):
  attributes 64 × 8.25 KiB = 528 KiB, events 16 × 8 × 8.25 KiB = 1056 KiB, links 8 × 8 × 8.25 KiB =
  528 KiB, name/status/ids < 16 KiB: about 2.1 MiB, so any one span fits one export request.
- `SizeBoundedExporter` wraps every exporter: it splits the BatchSpanProcessor's batch (512 spans by
  default) into requests whose size bound stays under `EXPORT_REQUEST_MAX_BYTES` (3 MiB, below the
  collector's 4 MiB OTLP/gRPC limit). A span that alone exceeds it (only possible through huge arrays,
  which the SDK does not count) is dropped alone, with a WARNING; the others are sent.
- `record_exception(span, err)` records an `exception` event with a clipped message and stack trace.

W3C trace context on the hot path (`span_headers`, `w3c_context`): with the SDK's default global
propagator (tracecontext + baggage) the common case is formatted and parsed here directly (the
propagators' own inject/extract cost 8-11 us a call); any other propagator, baggage or tracestate goes
through `opentelemetry.propagate` as before, with the same result.
"""
from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from collections.abc import Sequence

import re

from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from services.common.clip import MESSAGE_MAX_CHARS, clip, clip_message
from services.common.ids import random_bytes
from services.common.log_limit import RepeatLimit

log = logging.getLogger(__name__)

SPAN_LIMITS = SpanLimits(max_attribute_length=2048, max_span_attributes=64, max_events=16,
                         max_event_attributes=8, max_links=8, max_link_attributes=8)
# Below the collector's 4 MiB OTLP/gRPC message limit (services.tracecollector.settings), with room
# for the request's resource and scope.
EXPORT_REQUEST_MAX_BYTES = 3 * 1024 * 1024
STACKTRACE_MAX_CHARS = 2000


# (the global propagator, whether it is the SDK's default W3C pair), checked again when it changes.
_w3c_default: tuple[object, bool] = (None, False)
# A version-00 traceparent exactly (the propagator's own regex also accepts surrounding blanks, later
# versions and extra fields: those take the propagator).
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


def _default_textmap() -> bool:
    """Whether the global propagator is `tracecontext,baggage` (or `tracecontext` alone), the SDK's
    types exactly (a subclass may change what they write)."""
    global _w3c_default
    textmap = propagate.get_global_textmap()
    if _w3c_default[0] is not textmap:
        kinds = [type(p) for p in getattr(textmap, "_propagators", ())] if type(textmap) is CompositePropagator else []
        _w3c_default = (textmap, kinds in ([TraceContextTextMapPropagator, W3CBaggagePropagator],
                                           [TraceContextTextMapPropagator]))
    return _w3c_default[1]


def span_headers(span: trace.Span) -> tuple[tuple[str, str], ...]:
    """The metadata that makes `span` the parent of an outgoing call: what `propagate.inject` writes
    for the current context with `span` set in it (`traceparent`, `tracestate` when the span has one,
    `baggage` when the context carries any); () for an invalid span."""
    if not _default_textmap() or baggage.get_all():
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        return tuple(carrier.items())
    sc = span.get_span_context()
    if not sc.is_valid:
        return ()
    tp = ("traceparent", f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}")
    return (tp, ("tracestate", sc.trace_state.to_header())) if sc.trace_state else (tp,)


def w3c_context(md: dict[str, str]) -> otel_context.Context | None:
    """`propagate.extract(md)` for the common case (default propagator, a version-00 `traceparent`, no
    `tracestate` or `baggage`): the remote parent in a new Context; None when that case does not apply
    (the caller runs the propagator)."""
    tp = md.get("traceparent")
    if tp is None or "tracestate" in md or "baggage" in md or not _default_textmap():
        return None
    m = _TRACEPARENT.fullmatch(tp)
    if m is None:
        return None
    trace_id, span_id, flags = m.groups()
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return otel_context.Context()  # what the propagator answers: no parent
    sc = trace.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=trace.TraceFlags(int(flags, 16)))
    return trace.set_span_in_context(trace.NonRecordingSpan(sc), otel_context.Context())


class SystemRandomIdGenerator(IdGenerator):
    """Trace and span ids from the OS's random source (os.urandom, read a pool at a time:
    `ids.random_bytes`), not the `random` module the SDK's default uses: code that seeds `random` (a
    test framework, a library) would otherwise make ids repeat — the chat gateway keys its turns by
    trace id (found by tests/fuzz: a repeated trace id made a turn's insert conflict, INTERNAL)."""

    def generate_span_id(self) -> int:
        while True:
            v = int.from_bytes(random_bytes(8), "big")
            if v:
                return v

    def generate_trace_id(self) -> int:
        while True:
            v = int.from_bytes(random_bytes(16), "big")
            if v:
                return v


def _value_bound(v: object) -> int:
    """Upper bound of an AnyValue's encoded size in bytes (4 bytes per character, 16 for framing)."""
    if isinstance(v, str):
        return 4 * len(v) + 16
    if isinstance(v, bytes):
        return len(v) + 16
    if isinstance(v, Sequence):
        return 16 + sum(_value_bound(x) for x in v)
    return 16


def _attrs_bound(attrs) -> int:
    return sum(4 * len(k) + 16 + _value_bound(v) for k, v in (attrs or {}).items())


def span_size_bound(span: ReadableSpan) -> int:
    """Upper bound, in bytes, of `span` encoded as an OTLP protobuf Span."""
    n = 96 + 4 * len(span.name) + 4 * len(span.status.description or "") + _attrs_bound(span.attributes)
    for ev in span.events:
        n += 32 + 4 * len(ev.name) + _attrs_bound(ev.attributes)
    for ln in span.links:
        n += 64 + _attrs_bound(ln.attributes)
    return n


class SizeBoundedExporter(SpanExporter):
    """Sends a batch as several requests, each bounded by `max_bytes` (see the module docstring)."""

    def __init__(self, inner: SpanExporter, max_bytes: int = EXPORT_REQUEST_MAX_BYTES):
        self._inner = inner
        self._max = max_bytes

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = SpanExportResult.SUCCESS
        chunk: list[ReadableSpan] = []
        size = 0
        for s in spans:
            n = span_size_bound(s)
            if n > self._max:
                log.warning("span %s (trace %032x) dropped: about %d bytes exceeds the export limit of %d",
                            clip(s.name), s.context.trace_id, n, self._max)
                continue
            if chunk and size + n > self._max:
                if self._inner.export(chunk) is not SpanExportResult.SUCCESS:
                    result = SpanExportResult.FAILURE
                chunk, size = [], 0
            chunk.append(s)
            size += n
        if chunk and self._inner.export(chunk) is not SpanExportResult.SUCCESS:
            result = SpanExportResult.FAILURE
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def record_exception(span: trace.Span, err: BaseException) -> None:
    """An `exception` event on `span` whose message and stack trace are clipped (`services.common.clip`)."""
    span.record_exception(err, attributes={"exception.message": clip_message(err),
                                           "exception.stacktrace": clip_tail("".join(traceback.format_exception(err)))})


def clip_tail(text: str, limit: int = STACKTRACE_MAX_CHARS) -> str:
    """The last `limit` characters of a stack trace (its deepest frames and the message), marked."""
    return text if len(text) <= limit else f"(-{len(text) - limit} chars)…" + text[-limit:]


def exporting() -> bool:
    """False when the `OTEL_*` environment turns span export off; ValueError for an
    `OTEL_TRACES_EXPORTER` other than `otlp` or `none` (it used to mean OTLP, silently)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind not in ("otlp", "none"):
        raise ValueError(f"OTEL_TRACES_EXPORTER={kind[:40]!r}: use 'otlp' or 'none'")
    return kind == "otlp"


def check_span_environment(span_export: str = "process") -> None:
    """ValueError naming the variable when an `OTEL_*` span setting would fail later (the exporter,
    the OTLP protocol, and, for the export child, the `OTEL_BSP_*` values): run with the settings at
    start-up (`CommonSettings`), so a bad value is one line, not a traceback."""
    if not exporting():
        return
    _protocol()
    if span_export == "process":
        from services.common.span_pipe import bsp_settings  # noqa: PLC0415

        bsp_settings()


def make_exporter(max_timeout_s: float | None = None, requests: bool = False) -> SpanExporter | None:
    """The OTLP span exporter the `OTEL_*` environment asks for, or None when exporting is off;
    ValueError for an unknown protocol. `max_timeout_s`: the time one export may take, its retries
    included, instead of OTEL_EXPORTER_OTLP_TIMEOUT (the span spool retries, not the exporter).
    `requests`: one that exports encoded requests (`otlp_spans.RawRequest`, the span export child's)
    instead of ReadableSpans."""
    if not exporting():
        return None
    protocol = _protocol()
    timeout = max_timeout_s  # None: the exporter reads OTEL_EXPORTER_OTLP_TIMEOUT (10 s)
    if requests:
        from services.common.otlp_spans import request_exporters  # noqa: PLC0415

        grpc_exporter, http_exporter = request_exporters()
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as grpc_exporter  # noqa: PLC0415, N813
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as http_exporter  # noqa: PLC0415, N813
    if protocol == "grpc":
        from services.common.reconnect import RECONNECT_OPTIONS  # noqa: PLC0415 - fast reconnect to the collector

        return grpc_exporter(channel_options=tuple(RECONNECT_OPTIONS), timeout=timeout)
    return http_exporter(timeout=timeout)


def _protocol() -> str:
    name = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    if name not in os.environ:
        name = "OTEL_EXPORTER_OTLP_PROTOCOL"
    protocol = os.environ.get(name, "grpc")
    if protocol not in ("grpc", "http/protobuf"):
        raise ValueError(f"{name}={protocol[:40]!r}: use 'grpc' or 'http/protobuf'")
    return protocol


def span_spool_place(service_name: str) -> tuple[Path, int]:
    """(directory, bytes) of the span spool of `service_name`'s export child: AGENTFEEDBACK_SPAN_SPOOL_DIR
    (default `<AGENTFEEDBACK_DATA_DIR>/span-spool/<service>`) and AGENTFEEDBACK_SPAN_SPOOL_MAX_BYTES
    (default 64 MiB; 0: no spool). Both are validated with the settings (CommonSettings)."""
    from services.common.span_spool import MAX_BYTES  # noqa: PLC0415

    # CommonSettings.data_dir's default (settings import this module, so not from there).
    data_dir = os.environ.get("AGENTFEEDBACK_DATA_DIR") or str(Path(__file__).resolve().parents[2] / ".data")
    base = os.environ.get("AGENTFEEDBACK_SPAN_SPOOL_DIR") or os.path.join(data_dir, "span-spool")
    raw = os.environ.get("AGENTFEEDBACK_SPAN_SPOOL_MAX_BYTES", "").strip()
    return Path(base) / service_name, int(raw) if raw.isdigit() else MAX_BYTES


def setup_tracing(service_name: str, exporter: SpanExporter | None = None) -> TracerProvider:
    """A TracerProvider for one service, with `SPAN_LIMITS`. Spans go, batched, to `exporter` (tests
    pass one) on a thread of this process (the SDK's BatchSpanProcessor, with `SizeBoundedExporter`);
    without one, to the exporter the `OTEL_*` environment asks for, which runs in a child process
    (`services.common.span_pipe`) unless `AGENTFEEDBACK_SPAN_EXPORT=thread` keeps it on a thread here."""
    resource = Resource.create({"service.name": service_name, "service.namespace": "agentfeedback"})
    provider = TracerProvider(resource=resource, span_limits=SPAN_LIMITS, id_generator=SystemRandomIdGenerator())
    # AGENTFEEDBACK_SPAN_EXPORT is validated with the other settings (CommonSettings.span_export).
    if exporter is None and exporting() and os.environ.get("AGENTFEEDBACK_SPAN_EXPORT", "process") != "thread":
        from services.common.span_pipe import ProcessSpanProcessor  # noqa: PLC0415 - imports the SDK's pieces

        _protocol()  # a bad setting fails the service at start, not later in its child
        provider.add_span_processor(ProcessSpanProcessor(resource, service_name, *span_spool_place(service_name)))
        return provider
    exp = exporter if exporter is not None else make_exporter()
    if exp is not None:
        provider.add_span_processor(BatchSpanProcessor(SizeBoundedExporter(exp)))
    return provider


# The trace id of the request being served, for log lines written where no span is current (the chat
# turn's own trace, an error logged after its span ended). Set by the server interceptor and the turn.
REQUEST_TRACE_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentfeedback_trace_id", default=None)


class _TraceIdFilter(logging.Filter):
    """Puts the current trace_id/span_id on every log record: the current span's, else the request's
    (`REQUEST_TRACE_ID`), `-` outside any request."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        record.trace_id = format(ctx.trace_id, "032x") if ctx.is_valid else (REQUEST_TRACE_ID.get() or "-")
        record.span_id = format(ctx.span_id, "016x") if ctx.is_valid else "-"
        msg = record.getMessage()
        if len(msg) > MESSAGE_MAX_CHARS:  # a client value inside a log line: bounded (services.common.clip)
            record.msg, record.args = clip_message(msg), None
        return True


class _ClippingFormatter(logging.Formatter):
    """Stack traces in log lines keep their last `STACKTRACE_MAX_CHARS` × 4 characters. Times are UTC,
    ISO 8601 with the offset: `2026-12-01T09:33:31.123+00:00`."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}+00:00"

    def formatException(self, ei) -> str:  # noqa: N802 - logging's name
        return clip_tail(super().formatException(ei), 4 * STACKTRACE_MAX_CHARS)


class _JsonFormatter(_ClippingFormatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", "-"),
            "span_id": getattr(record, "span_id", "-"),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def log_handler(stream, fmt: str = "text") -> logging.Handler:
    """The handler every service logs through: trace ids filled, UTC times with offset, clipped
    messages and stack traces, a database outage's repeated lines limited (services.common.log_limit); `fmt` `text` (`<time> <LEVEL> <logger> [<trace_id>] <message>`) or `json`."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(RepeatLimit())
    handler.addFilter(_TraceIdFilter())
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_ClippingFormatter("%(asctime)s %(levelname)s %(name)s [%(trace_id)s] %(message)s"))
    return handler


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Root logging: text locally, JSON lines on stdout when deployed; trace ids on every record."""
    handler = log_handler(sys.stdout if fmt == "json" else sys.stderr, fmt)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
