"""The span pipe's child encodes exactly the span its parent ended: the OTLP bytes are the SDK encoder's."""
from __future__ import annotations

import io

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from services.common.otlp_spans import RequestEncoder, encode_span
from services.common.span_pipe import compact, read_msg, write_msg
from services.common.telemetry import SPAN_LIMITS


def test_a_piped_span_encodes_to_the_same_otlp_bytes_dropped_counts_included():
    mem = InMemorySpanExporter()
    tp = TracerProvider(span_limits=SPAN_LIMITS)
    tp.add_span_processor(SimpleSpanProcessor(mem))
    tracer = tp.get_tracer("agentfeedback.test", "1.2")
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:
        link = Link(parent.get_span_context(), {f"why{i}": "retry" for i in range(12)})
        with tracer.start_as_current_span("child", kind=SpanKind.CLIENT, links=[link],
                                          attributes={f"k{i}": i for i in range(70)}) as child:
            child.set_attribute("list", ["a", "b"])
            child.set_attribute("long", "x" * 3000)
            for i in range(20):
                child.add_event("chat.in", {"n": i, "f": 1.5, "ok": True})
            child.add_event("big", {f"a{i}": i for i in range(12)})  # over the 8 attributes of an event
            child.set_status(Status(StatusCode.ERROR, "boom"))
    spans = mem.get_finished_spans()
    # The limits were hit (the counts are in the OTLP bytes compared below).
    assert spans[0].dropped_attributes > 0 and spans[0].dropped_events > 0
    assert spans[0].events[-1].dropped_attributes > 0 and spans[0].links[0].dropped_attributes > 0
    buf = io.BytesIO()
    write_msg(buf, ("spans", [compact(s) for s in spans]))
    buf.seek(0)
    kind, body = read_msg(buf)
    assert read_msg(buf) is None  # end of input
    resource = spans[0].resource
    ours = RequestEncoder(dict(resource.attributes), resource.schema_url).request([(r[13], encode_span(r)) for r in body])
    assert kind == "spans"
    assert ours == encode_spans(spans).SerializeToString()
