"""services.common.telemetry's W3C fast paths give what `opentelemetry.propagate` gives."""
from __future__ import annotations

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from services.common.server import _extract
from services.common.telemetry import span_headers, w3c_context

TRACER = TracerProvider().get_tracer("test")


def _injected(span: trace.Span) -> tuple[tuple[str, str], ...]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return tuple(carrier.items())


def _parent(ctx: otel_context.Context) -> SpanContext:
    return trace.get_current_span(ctx).get_span_context()


@pytest.mark.parametrize("span", [
    TRACER.start_span("root", context=otel_context.Context()),
    NonRecordingSpan(SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(0))),
    NonRecordingSpan(SpanContext(3, 4, is_remote=False, trace_flags=TraceFlags(1),
                                 trace_state=TraceState([("vendor", "v1")]))),
    trace.INVALID_SPAN,
])
def test_span_headers_are_what_the_propagator_injects(span):
    assert span_headers(span) == _injected(span)
    token = otel_context.attach(baggage.set_baggage("user", "u1"))  # baggage in the current context
    try:
        assert span_headers(span) == _injected(span)
    finally:
        otel_context.detach(token)


def test_span_headers_follow_another_global_propagator():
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([TraceContextTextMapPropagator()]))
    try:
        span = TRACER.start_span("root", context=otel_context.Context())
        assert span_headers(span) == _injected(span)
    finally:
        propagate.set_global_textmap(before)


@pytest.mark.parametrize("md", [
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03", "authorization": "Bearer x"},
    {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},
    {"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"},
    {"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"},
    {"traceparent": " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 "},
    {"traceparent": "garbage"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=v1"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "baggage": "user=u1"},
])
def test_extract_is_what_the_propagator_extracts(md):
    class Getter:
        @staticmethod
        def get(carrier, key):
            v = carrier.get(key)
            return [v] if v is not None else None

        @staticmethod
        def keys(carrier):
            return list(carrier)

    want = propagate.extract(md, getter=Getter())
    got = _extract(md)
    assert _parent(got) == _parent(want)
    assert _parent(got).trace_state == _parent(want).trace_state
    assert baggage.get_all(got) == baggage.get_all(want)
    if w3c_context(md) is not None:  # the fast path answered: the same context contents
        assert dict(got).keys() == dict(want).keys()
