"""The span pipe's child encodes exactly the span its parent ended: the OTLP bytes are the SDK encoder's; a span
`record_span` queues directly is the tuple the SDK's span would have made."""
from __future__ import annotations

import io

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from services.common import span_pipe
from services.common.otlp_spans import RequestEncoder, encode_span
from services.common.span_pipe import PipeSpan, ProcessSpanProcessor, compact, read_msg, record_span, start_span, write_msg
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


def _captured(sampler=None) -> tuple[TracerProvider, list[tuple]]:
    """A provider whose only processor is a ProcessSpanProcessor that keeps what it is given (no child);
    a tuple that came from an SDK span (its on_end) is marked: `("sdk", tuple)`."""
    got: list[tuple] = []
    proc = ProcessSpanProcessor.__new__(ProcessSpanProcessor)
    proc.put = got.append
    proc.on_end = lambda span: got.append(("sdk", compact(span)))
    kw = {"sampler": sampler} if sampler else {}
    tp = TracerProvider(span_limits=SPAN_LIMITS, shutdown_on_exit=False, **kw)
    tp.add_span_processor(proc)
    return tp, got


def _without_ids_and_times(rec: tuple) -> tuple:
    """A `compact` tuple less its span id, start and end times and event times (what two calls differ in)."""
    name, ctx, parent, kind, _start, _end, attrs, events, *rest = rec
    return (name, (ctx[0], *ctx[2:]), parent, kind, attrs, [(n, a) for n, _t, a in events], *rest)


def test_record_span_queues_the_tuple_the_sdk_span_would_make_limits_trace_state_and_flags_included(monkeypatch):
    tp, got = _captured()
    tracer = tp.get_tracer("agentfeedback.test", "1.2")
    state = TraceState([("vendor", "v1")])
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID),
                         trace_state=state)
    attrs = {**{f"k{i}": i for i in range(70)}, "long": "x" * 3000, "list": ["a", "b"], "none": None, "f": 1.5}
    links = [Link(SpanContext(0x123, 0, is_remote=True, trace_flags=TraceFlags(1)), {"feedback.link": "rated_turn", "long": "y" * 3000}),
             Link(SpanContext(0, 0, is_remote=False))]  # invalid, no attributes: the SDK drops it
    events = [("gen_ai.evaluation.result", {f"a{i}": "v" for i in range(12)}), ("plain", {"n": 1, "ok": True})]
    recs = {}
    for direct in (True, False):
        monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
        with otel_trace.use_span(NonRecordingSpan(remote)):
            record_span(tracer, "feedback.evaluation", SpanKind.INTERNAL, attrs, links, events)
        (rec,) = got
        got.clear()
        recs[direct] = rec if direct else rec[1]
        assert (rec[0] == "sdk") is not direct
    assert recs[True][1][1] != recs[False][1][1]  # each its own span id
    assert _without_ids_and_times(recs[True]) == _without_ids_and_times(recs[False])
    assert recs[True][6][1] > 0 and recs[True][7][0][2][1] > 0 and len(recs[True][9]) == 1  # the limits were hit
    assert recs[True][1][3] == TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID and recs[True][1][4] == (("vendor", "v1"),)
    assert recs[True][4] <= recs[True][7][0][1] <= recs[True][5]  # start <= event <= end


def test_record_span_roots_a_trace_without_a_parent_and_leaves_unsampled_spans_to_the_sdk(monkeypatch):
    tp, got = _captured()
    record_span(tp.get_tracer("t"), "root", SpanKind.INTERNAL, {"a": "b"})
    (rec,) = got  # queued directly
    assert rec[2] is None and rec[1][0] != 0 and rec[0] == "root"
    tp, got = _captured(sampler=ALWAYS_OFF)
    record_span(tp.get_tracer("t"), "dropped", SpanKind.INTERNAL, {"a": "b"})
    assert got == []  # left to the SDK, which records nothing of a dropped span


def test_record_span_decides_as_a_parent_based_sampler_whatever_its_delegates(monkeypatch):
    """The StaticSampler shortcut (`_static_choice`) and the sampler itself agree: per kind of parent, the
    same spans are queued, with the same flags and trace state (a ratio sampler is asked as before)."""
    state = TraceState([("vendor", "v1")])
    parents = {"root": None}
    for remote in (True, False):
        for sampled in (True, False):
            flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
            parents[f"remote={remote} sampled={sampled}"] = SpanContext(0xABC, 0xDEF, is_remote=remote,
                                                                        trace_flags=flags, trace_state=state)
    samplers = [ParentBased(ALWAYS_ON), ParentBased(ALWAYS_OFF),
                ParentBased(ALWAYS_OFF, remote_parent_sampled=ALWAYS_OFF, remote_parent_not_sampled=ALWAYS_ON,
                            local_parent_sampled=ALWAYS_OFF, local_parent_not_sampled=ALWAYS_ON),
                ParentBased(TraceIdRatioBased(1.0))]
    for sampler in samplers:
        tp, got = _captured(sampler)
        tracer = tp.get_tracer("t")
        for what, parent in parents.items():
            recs = {}
            for direct in (True, False):
                monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
                with otel_trace.use_span(NonRecordingSpan(parent or SpanContext(0, 0, is_remote=False))):
                    record_span(tracer, "s", SpanKind.INTERNAL, {"a": "b"})
                recs[direct] = [r if direct else r[1] for r in got]
                got.clear()
            # A root's trace id is new each time: compared with the flags and trace state after it.
            same = [[(r[1][2:], _without_ids_and_times(r)[2:]) for r in recs[d]] for d in (True, False)]
            assert same[0] == same[1], (sampler.get_description(), what)
            assert len(recs[True]) == len(recs[False]) <= 1


def test_record_span_uses_the_sdk_beside_another_processor():
    tp, got = _captured()
    mem = InMemorySpanExporter()
    tp.add_span_processor(SimpleSpanProcessor(mem))
    record_span(tp.get_tracer("t"), "both", SpanKind.INTERNAL, {"a": "b"}, events=[("e", {"n": 1})])
    (span,) = mem.get_finished_spans()
    assert got == [("sdk", compact(span))] and span.events[0].name == "e"


def _exercise(span) -> None:
    """What the interceptor and handlers do to a span, the limits' edges included."""
    span.set_attribute("rpc.grpc.status_code", 5)
    span.set_attribute("", "no key")
    span.set_attributes({f"m{i}": "x" * (i * 300) for i in range(70)})  # over the count and the length
    span.set_attribute("m3", ["a", "b"])  # set again: moves last
    for i in range(18):
        span.add_event(f"e{i}", {f"a{j}": j for j in range(10)})
    span.add_event("at", {"n": 1}, timestamp=0)
    span.add_link(SpanContext(0x77, 0x88, is_remote=True, trace_flags=TraceFlags(1)), {"why": "retry"})
    span.add_link(SpanContext(0, 0, is_remote=False))  # invalid, no attributes: not kept
    span.update_name("renamed")
    span.set_status(StatusCode.ERROR, "first")
    span.set_status(Status(StatusCode.ERROR, "second"), "ignored")
    span.set_status(Status(StatusCode.UNSET))
    try:
        raise ValueError("bad value")
    except ValueError as err:
        span.record_exception(err, {"exception.message": "clipped"})


def _exercise_ok_then_end(span) -> None:
    span.set_status(StatusCode.OK)
    span.set_status(StatusCode.ERROR, "after OK: ignored")
    span.end()
    span.end()  # twice: a warning, nothing queued
    span.set_attribute("late", 1)
    span.add_event("late")


def test_start_span_gives_a_pipe_span_that_queues_what_the_sdk_span_would(monkeypatch):
    tp, got = _captured()
    tracer = tp.get_tracer("agentfeedback.test", "1.2")
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    parent = otel_trace.set_span_in_context(NonRecordingSpan(remote))
    recs = {}
    for direct in (True, False):
        monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
        for ok in (False, True):
            span = start_span(tracer, "svc/Method", context=parent, kind=SpanKind.SERVER,
                              attributes={"rpc.system": "grpc", "rpc.method": "Method"},
                              links=[Link(SpanContext(0x55, 0x66, is_remote=True), {"l": "x" * 3000})])
            assert isinstance(span, PipeSpan) is direct
            assert span.get_span_context().trace_id == 0xABC and span.is_recording()
            _exercise(span)
            if ok:
                _exercise_ok_then_end(span)
            else:
                span.end()
            assert not span.is_recording()
            (rec,) = got
            got.clear()
            assert (rec[0] == "sdk") is not direct
            recs[direct, ok] = rec if direct else rec[1]
    for ok in (False, True):
        assert _without_ids_and_times(recs[True, ok]) == _without_ids_and_times(recs[False, ok])
    rec = recs[True, False]
    assert rec[6][1] > 0 and rec[8] > 0 and rec[11] == StatusCode.ERROR.value and rec[12] == "second"
    assert rec[7][-1][0] == "exception" and rec[7][-1][2][0]["exception.message"] == "clipped"
    assert recs[True, True][11] == StatusCode.OK.value


def test_a_pipe_span_as_a_context_manager_records_the_exception_as_the_sdk_span(monkeypatch):
    tp, got = _captured()
    tracer = tp.get_tracer("t")
    recs = {}
    for direct in (True, False):
        monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
        try:
            with start_span(tracer, "root") as span:
                raise KeyError("k")
        except KeyError:
            pass
        (rec,) = got
        got.clear()
        recs[direct] = rec if direct else rec[1]
        assert span.get_span_context().trace_id != 0 and recs[direct][2] is None  # a root of its own trace

    def strip(rec: tuple) -> tuple:
        name, ctx, *rest = _without_ids_and_times(rec)
        return (name, ctx[1:], *rest)  # each root its own trace id

    assert strip(recs[True])[:5] == strip(recs[False])[:5] and strip(recs[True])[6:] == strip(recs[False])[6:]
    # The stack traces name each path's own frames; the rest of the exception event is the same.
    (direct_ev,), (sdk_ev,) = strip(recs[True])[5], strip(recs[False])[5]
    for ev in (direct_ev, sdk_ev):
        ev[1][0].pop("exception.stacktrace")
    assert direct_ev == sdk_ev and recs[True][12] == "KeyError: 'k'"


def test_start_span_keeps_a_given_start_time_as_the_sdk_span(monkeypatch):
    """`start_span(start_time=…)` (a turn's `chat.turn` starts at t0, read before the span) and `end(t)`: the
    span's times are those, on both paths, the rest as before (the turn's root: a new trace, the caller a link)."""
    tp, got = _captured()
    tracer = tp.get_tracer("t")
    caller = SpanContext(0x99, 0x98, is_remote=True, trace_flags=TraceFlags(1))
    recs = {}
    for direct in (True, False):
        monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
        span = start_span(tracer, "chat.turn", context=otel_context.Context(), kind=SpanKind.SERVER, attributes={"chat.instance": "instances/x"},
                          links=[Link(caller)], start_time=1_000)
        assert isinstance(span, PipeSpan) is direct
        span.add_event("chat.in", {"chat.message": "m"}, timestamp=1_000)
        span.end(2_000)
        (rec,) = got
        got.clear()
        recs[direct] = rec if direct else rec[1]
        assert recs[direct][4:6] == (1_000, 2_000) and recs[direct][2] is None
    (name, ctx, *rest), (name2, ctx2, *rest2) = (_without_ids_and_times(recs[d]) for d in (True, False))
    assert (name, ctx[1:], rest) == (name2, ctx2[1:], rest2)  # each root its own trace id
    assert recs[True][9] == [((0x99, 0x98, True, 1), ({}, 0))]
