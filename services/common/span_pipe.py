"""Span export out of the serving process: `ProcessSpanProcessor` hands each ended span, as a tuple of
plain values, to a child process (`services.common.span_export_worker`) that encodes it as OTLP
(`services.common.otlp_spans`) and exports it with the SDK's standard exporter (the `OTEL_*`
environment, as `telemetry.make_exporter`).

Why: the SDK's `BatchSpanProcessor` encodes a whole batch (≈ 32 µs a span, 512 spans at most) on a
thread of the serving process, holding the GIL for milliseconds at a time; every RPC that needed the
GIL meanwhile waited up to a switch interval (5 ms) per wait (issue 17: the periodic p99 spikes of a
chat turn and of CreateFeedback). Here the serving process only copies the span's fields into a tuple
(≈ 5 µs) and pickles a batch (≈ 3 µs a span) on its flusher thread; encoding and the gRPC call run in
the child, on its own GIL.

Semantics follow the SDK's batch processor and its `OTEL_BSP_*` variables: a batch leaves every
`OTEL_BSP_SCHEDULE_DELAY` ms (5000) or as soon as `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512) spans wait;
beyond `OTEL_BSP_MAX_QUEUE_SIZE` (2048) waiting spans, new ones are dropped and counted (a WARNING
names the count); a value that is not a positive integer stops the service at start (ValueError).
The child exits when its input closes (its parent stopped or died), after exporting what it read.
Delivery (`_ChildLink`): the child confirms each batch once exported; a child that died is started
again (WARNING) and gets every batch it had not confirmed, so killing it loses no span (a batch it
exported but had not confirmed is sent twice: the collector keeps a span once). Framing on the pipe:
4-byte big-endian length + pickle; the child answers one line per message (the sequence number, then
its spool's dropped and waiting spans).
Spool (`services.common.span_spool`): a batch the collector refuses is kept on disk by the child
and sent again until it is taken (bounded; drops counted: `span_export_metrics`), so an outage of
the collector or its database of a few minutes loses no span.
"""
from __future__ import annotations

import logging
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes, _clean_attribute_value
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, Tracer
from opentelemetry.sdk.trace import _Span as _SdkSpan
from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics
from opentelemetry.sdk.trace.sampling import ParentBased, StaticSampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import INVALID_SPAN_CONTEXT, Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation import _SPAN_KEY

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")
_ROOT = Path(__file__).resolve().parents[2]  # the project (services.common.settings.PROJECT_ROOT)
WORKER_MODULE = "services.common.span_export_worker"


def _ctx(c: SpanContext | None) -> tuple | None:
    """(trace id, span id, is remote, trace flags[, tracestate items when there are any]). A SpanContext
    is a tuple (trace id, span id, is remote, flags, state, is valid): read by index, not through its
    five properties (≈ 0.3 -> 0.1 µs; three a span)."""
    if c is None:
        return None
    if type(c) is SpanContext:
        trace_id, span_id, remote, flags, state = c[0], c[1], c[2], c[3], c[4]
    else:
        trace_id, span_id, remote, flags, state = c.trace_id, c.span_id, c.is_remote, c.trace_flags, c.trace_state
    if state:
        return trace_id, span_id, remote, int(flags), tuple(state.items())
    return trace_id, span_id, remote, int(flags)


def _attrs(a: Any) -> tuple[dict[str, Any], int]:
    """(attributes as a plain dict, how many the limits dropped). A BoundedAttributes is copied from its
    own dict: `dict()` of the mapping calls its Python `__getitem__` once per key."""
    if not a:
        return {}, 0
    if isinstance(a, BoundedAttributes):
        return dict(a._dict), a.dropped
    return dict(a), 0


# id(scope) → (the scope, its tuple): a tracer's scope is made once and never changes; the same tuple
# object each span also lets a batch's pickle write it once (memo). The scope is held: its id is not reused.
_SCOPES: dict[int, tuple[InstrumentationScope, tuple]] = {}


def _scope(scope: InstrumentationScope | None) -> tuple | None:
    """(name, version, schema url[, attribute items when there are any])."""
    if scope is None:
        return None
    got = _SCOPES.get(id(scope))
    if got is not None and got[0] is scope:
        return got[1]
    if scope.attributes:
        out = scope.name, scope.version, scope.schema_url, tuple(scope.attributes.items())
    else:
        out = scope.name, scope.version, scope.schema_url
    if len(_SCOPES) >= 256:  # tracers are few; a bound all the same
        _SCOPES.clear()
    _SCOPES[id(scope)] = (scope, out)
    return out


def compact(span: ReadableSpan) -> tuple:
    """The fields of an ended span the OTLP encoder reads (`services.common.otlp_spans.encode_span`),
    as plain (picklable) values; a spooled batch (`span_spool`) holds these too.

    Read from the ReadableSpan's own fields (the SDK is pinned, pyproject.toml): its properties copy
    (a MappingProxy of the attributes, a tuple of the events and of the links), which made this 10-20 µs
    a span on the serving thread, twice what the fields cost (issue 29: two spans a rating put)."""
    status = span._status
    return (
        span._name, _ctx(span._context), _ctx(span._parent), span._kind.value, span._start_time, span._end_time,
        _attrs(span._attributes),
        [(e.name, e.timestamp, _attrs(e.attributes)) for e in span._events], span.dropped_events,
        [(_ctx(ln.context), _attrs(ln.attributes)) for ln in span._links], span.dropped_links,
        status.status_code.value, status.description, _scope(span._instrumentation_scope),
    )


# False: `record_span` and `start_span` always go through the SDK (tests compare both paths' spans; the bench pairs them).
DIRECT_SPANS = True
_PLAIN = (bool, int, float)
_UNSET = StatusCode.UNSET.value


def _bounded(attrs: Any, maxlen: int | None, max_len: int | None) -> tuple[dict[str, Any], int]:
    """`_attrs(BoundedAttributes(maxlen, attrs, max_value_len=max_len))`, without building one when every
    key is a non-empty str and every value a str within `max_len` or a bool/int/float (what it keeps as is)."""
    if not attrs:
        return {}, 0
    if maxlen is None or len(attrs) <= maxlen:
        for k, v in attrs.items():
            t = type(v)
            if type(k) is not str or not k or not (t in _PLAIN or t is str and (max_len is None or len(v) <= max_len)):
                break
        else:
            return dict(attrs), 0
    b = BoundedAttributes(maxlen, attrs, max_value_len=max_len)
    return dict(b._dict), b.dropped


def _direct_processor(tracer: Any) -> ProcessSpanProcessor | None:
    """The ProcessSpanProcessor `tracer`'s provider hands every span to, when it is the only processor, the
    tracer is the SDK's own, enabled, and without the SDK's internal span metrics; else None."""
    procs = getattr(getattr(tracer, "span_processor", None), "_span_processors", None)
    if (DIRECT_SPANS and procs and len(procs) == 1 and type(procs[0]) is ProcessSpanProcessor
            and type(tracer) is Tracer and tracer._is_enabled() and type(tracer._tracer_metrics) is NoOpTracerMetrics):
        return procs[0]
    return None


def _sampled(tracer: Any, name: str, kind: SpanKind, attributes: Any, links: Any, context: Any,
             static_only: bool = False) -> tuple | None:
    """What the SDK's `Tracer.start_span` decides for a span the pipe can take directly: (processor, its
    SpanContext, the parent's or None, the sampler's attributes); None when the SDK must make it (see
    `_direct_processor`, more links than the limits keep, or not sampled). `static_only`: None too when
    the sampler is not one whose answer ignores the span's name, attributes and links (`_static_choice`)."""
    proc = _direct_processor(tracer)
    if proc is None or tracer._span_limits.max_links is not None and len(links) > tracer._span_limits.max_links:
        return None
    parent = _parent_context(context)
    gen = tracer.id_generator
    if parent is not None and parent[5]:  # SpanContext (trace id, span id, remote, flags, state, is valid)
        trace_id, random_id = parent[0], parent[3].random_trace_id
    else:
        parent, trace_id, random_id = None, gen.generate_trace_id(), gen.is_trace_id_random()
    sampler = tracer.sampler
    static = _static_choice(sampler, parent) if type(sampler) is ParentBased else None
    if static is not None:  # what that StaticSampler answers, without its SamplingResult
        if not static._decision.is_sampled():
            return None
        trace_state, attrs = parent.trace_state if parent is not None else None, attributes
    elif static_only:
        return None
    else:
        result = sampler.should_sample(context, trace_id, name, kind, attributes, links)
        if not result.decision.is_sampled():
            return None
        trace_state, attrs = result.trace_state, result.attributes
    ctx = SpanContext(trace_id, gen.generate_span_id(), False, _RANDOM_SAMPLED if random_id else _SAMPLED, trace_state)
    return proc, ctx, parent, attrs


_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_RANDOM_SAMPLED = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
# Span types whose get_span_context is their SpanContext (no isinstance against the Span ABC per span).
_SPAN_TYPES: set[type] = set()


def _parent_context(context: Any) -> SpanContext:
    """`trace.get_current_span(context).get_span_context()`: the current span's own SpanContext (of
    `context`, else of the current context); INVALID_SPAN's when none (or not a Span)."""
    span = (context if context is not None else otel_context.get_current()).get(_SPAN_KEY)
    if span is None:
        return INVALID_SPAN_CONTEXT
    if type(span) not in _SPAN_TYPES:
        if not isinstance(span, trace.Span):
            return INVALID_SPAN_CONTEXT
        if type(span) in (PipeSpan, _SdkSpan, trace.NonRecordingSpan):
            _SPAN_TYPES.add(type(span))
    return span.get_span_context()


def _static_choice(sampler: ParentBased, parent: SpanContext | None) -> StaticSampler | None:
    """The delegate `ParentBased.should_sample` asks for a span whose parent is `parent` (None: a root),
    when it is a StaticSampler (the SDK's default `parentbased_always_on` has only those); else None.
    A StaticSampler's answer is its decision, the span's attributes and the parent's trace state, so
    `_sampled` takes it without building the SamplingResult (two more parent lookups, ≈ 4 µs a span)."""
    if parent is None:
        d = sampler._root
    elif parent.is_remote:
        d = sampler._remote_parent_sampled if parent.trace_flags.sampled else sampler._remote_parent_not_sampled
    else:
        d = sampler._local_parent_sampled if parent.trace_flags.sampled else sampler._local_parent_not_sampled
    return d if type(d) is StaticSampler else None


def _links(links: Any, lim: Any) -> list[tuple]:
    """The links the SDK's span keeps (`_is_valid_link`), as `compact` writes them."""
    return [(_ctx(ln.context), _bounded(ln.attributes, lim.max_link_attributes, lim.max_attribute_length))
            for ln in links if ln and ln.context and (ln.context.is_valid or ln.attributes or ln.context.trace_state)]


def record_span(tracer: trace.Tracer, name: str, kind: SpanKind, attributes: dict[str, Any],
                links: list[Link] = (), events: list[tuple[str, dict[str, Any]]] = ()) -> None:
    """One span that starts and ends now, a child of the current span, with `events` ((name, attributes)
    each, timestamped now); status UNSET.

    When the provider's only processor is a ProcessSpanProcessor and the sampler samples the span, the
    tuple `compact` would make of the SDK's span is built here and queued directly: the same ids, parent,
    flags, trace state, limits (`SpanLimits`: truncation, drops and their counts) and scope, without the
    SDK's span, event, link and bounded-attribute objects and their locks (≈ 100 µs a span, issue 29).
    Otherwise (other processors, not sampled, more events or links than the limits keep) the SDK makes
    it: start_span, add_event, end. The collector receives the same OTLP either way
    (tests/integration/test_span_pipe_direct.py)."""
    lim = getattr(tracer, "_span_limits", None)
    start = time.time_ns()
    got = _sampled(tracer, name, kind, attributes, links, None) \
        if lim is not None and (lim.max_events is None or len(events) <= lim.max_events) else None
    if got is not None:
        proc, ctx, parent, attrs = got
        evs = [(n, time.time_ns(), _bounded(a, lim.max_event_attributes, lim.max_attribute_length)) for n, a in events]
        proc.put((name, _ctx(ctx), _ctx(parent), kind.value, start, time.time_ns(),
                  _bounded(attrs, lim.max_span_attributes, lim.max_span_attribute_length),
                  evs, 0, _links(links, lim), 0, _UNSET, None, _scope(tracer._instrumentation_scope)))
        return
    span = tracer.start_span(name, kind=kind, attributes=attributes, links=links)
    for n, a in events:
        span.add_event(n, a)
    span.end()


# The first item of a deferred record (`record_deferred`): a span's name is a str, never None.
DEFERRED = None
# id(SpanLimits) → (the limits, their tuple as `record_deferred` sends them): one tuple object per tracer,
# written once per batch by the pickle (memo). The limits are held: their id is not reused.
_LIMITS: dict[int, tuple[Any, tuple]] = {}


def _limits(lim: Any) -> tuple:
    """(max span attributes, max span attribute length, max events, max event attributes, max links,
    max link attributes, max attribute length) of a SpanLimits (None: no limit)."""
    got = _LIMITS.get(id(lim))
    if got is not None and got[0] is lim:
        return got[1]
    out = (lim.max_span_attributes, lim.max_span_attribute_length, lim.max_events, lim.max_event_attributes,
           lim.max_links, lim.max_link_attributes, lim.max_attribute_length)
    if len(_LIMITS) >= 256:
        _LIMITS.clear()
    _LIMITS[id(lim)] = (lim, out)
    return out


def record_deferred(tracer: trace.Tracer, builder: str, args: tuple) -> bool:
    """Queue a span that starts and ends now, a child of the current span, as a small deferred record the
    export child expands (`expand`): `builder` ("module:function", importable in the child) is called there
    as `function(*args)` and returns the span's (name, kind, attributes, events, links): events as
    (name, attributes) each, timestamped at the span's time, links as (SpanContext tuple `_ctx` writes,
    attributes) each. The span gets the ids, parent, flags, trace state, time, limits and scope
    `record_span` would give it. False (nothing queued) when `record_span` would not queue it directly, or
    the sampler's answer could depend on the span's name, attributes or links (their building is what is
    deferred): then the caller makes the span itself.

    Why: building a span's attribute dicts, links and events and pickling them cost the serving process
    ≈ 10 % of a rating put's instructions (issue 29: the `feedback.evaluation` carrier); the fields it is
    built from are a few strings and a number."""
    got = _sampled(tracer, "", SpanKind.INTERNAL, None, (), None, static_only=True)
    if got is None:
        return False
    proc, ctx, parent, _attrs_ = got
    proc.put((DEFERRED, builder, _ctx(ctx), _ctx(parent), time.time_ns(), _limits(tracer._span_limits),
              _scope(tracer._instrumentation_scope), args))
    return True


_BUILDERS: dict[str, Any] = {}


def _kept(items: list, limit: int | None) -> tuple[list, int]:
    """(the last `limit` of `items`, how many before them were dropped), as the SDK's bounded lists (a
    deque with a maxlen) keep them."""
    if limit is None or len(items) <= limit:
        return items, 0
    return (items[len(items) - limit:] if limit else []), len(items) - limit


def expand(rec: tuple) -> tuple:
    """A queued record as `compact` writes it: a deferred one (`record_deferred`) built by its builder
    (ImportError / AttributeError when the builder cannot be found); any other as it is."""
    if rec[0] is not DEFERRED:
        return rec
    _, builder, ctx, parent, t, lim, scope, args = rec
    fn = _BUILDERS.get(builder)
    if fn is None:
        import importlib  # noqa: PLC0415 - the export child only

        module, _, name = builder.partition(":")
        fn = _BUILDERS[builder] = getattr(importlib.import_module(module), name)
    name, kind, attributes, events, links = fn(*args)
    max_attrs, max_attr_len, max_events, max_event_attrs, max_links, max_link_attrs, max_len = lim
    events, dropped_events = _kept(events, max_events)
    links = [(c, a) for c, a in links if a or c[0] and c[1] or len(c) > 4]  # `_links`: what the SDK's span keeps
    links, dropped_links = _kept(links, max_links)
    return (name, ctx, parent, kind.value, t, t, _bounded(attributes, max_attrs, max_attr_len),
            [(n, t, _bounded(a, max_event_attrs, max_len)) for n, a in events], dropped_events,
            [(c, _bounded(a, max_link_attrs, max_len)) for c, a in links], dropped_links, _UNSET, None, scope)


def start_span(tracer: trace.Tracer, name: str, context: Any = None, kind: SpanKind = SpanKind.INTERNAL,
               attributes: dict[str, Any] | None = None, links: list[Link] = (),
               start_time: int | None = None) -> trace.Span:
    """`tracer.start_span(name, context, kind, attributes, links, start_time)` (`start_time`: ns since the
    epoch, None: now); a `PipeSpan` when `record_span` would queue the span directly (same conditions):
    the interceptor's SERVER span of every call, a turn's `chat.turn`, `agent.think` and `tool.call`
    (issue 29)."""
    got = _sampled(tracer, name, kind, attributes, links or (), context)
    if got is None:
        return tracer.start_span(name, context=context, kind=kind, attributes=attributes, links=links,
                                 start_time=start_time)
    proc, ctx, parent, attrs = got
    return PipeSpan(proc, tracer, name, ctx, parent, kind, attrs, _links(links or (), tracer._span_limits), start_time)


_UNSET_STATUS = Status(StatusCode.UNSET)


class PipeSpan(trace.Span):
    """A sampled span `start_span` made for the span pipe: what the SDK's span does with each call (the
    same limits, truncation, drops and counts, status rules, exception events, warnings on an ended span),
    queued at `end` as the tuple `compact` makes of the SDK's. One task uses it at a time (no lock: the
    interceptor's span and a turn's live in their RPC's task)."""

    __slots__ = ("_proc", "_name", "_ctx", "_parent", "_kind", "_lim", "_scope", "_start", "_end", "_attrs",
                 "_dropped", "_events", "_dropped_events", "_links", "_dropped_links", "_status")

    def __init__(self, proc: ProcessSpanProcessor, tracer: Any, name: str, ctx: SpanContext,
                 parent: SpanContext | None, kind: SpanKind, attributes: Any, links: list[tuple],
                 start_time: int | None = None):
        self._proc, self._name, self._ctx, self._parent, self._kind = proc, name, ctx, parent, kind
        self._lim, self._scope = tracer._span_limits, tracer._instrumentation_scope
        self._attrs, self._dropped = _bounded(attributes, self._lim.max_span_attributes, self._lim.max_span_attribute_length)
        self._events: list[tuple] = []
        self._dropped_events = 0
        self._links, self._dropped_links = links, 0
        self._status = _UNSET_STATUS  # immutable: set_status replaces it
        self._end: int | None = None
        self._start = time.time_ns() if start_time is None else start_time

    def __repr__(self) -> str:
        return f'PipeSpan(name="{self._name}", context={self._ctx})'

    def get_span_context(self) -> SpanContext:
        return self._ctx

    def is_recording(self) -> bool:
        return self._end is None

    def _ended(self, what: str) -> bool:
        if self._end is None:
            return False
        log.warning("Tried calling %s on an ended span.", what)
        return True

    def _put_attribute(self, key: str, value: Any) -> None:
        """BoundedAttributes._setitem_locked: a key set again moves last; beyond the limit the oldest goes."""
        d, maxlen = self._attrs, self._lim.max_span_attributes
        if key in d:
            del d[key]
        if maxlen is not None and len(d) >= maxlen:
            del d[next(iter(d))]
            self._dropped += 1
        d[key] = value

    def set_attribute(self, key: str, value: Any) -> None:
        if self._end is not None:
            log.warning("Setting attribute on ended span.")
            return
        if self._lim.max_span_attributes == 0:
            self._dropped += 1
        elif not key or not isinstance(key, str):
            log.warning("invalid key `%s`. must be non-empty string. Dropping key from attributes.", key)
            self._dropped += 1
        else:
            self._put_attribute(key, _clean_attribute_value(value, self._lim.max_span_attribute_length))

    def set_attributes(self, attributes: Any) -> None:
        if self._end is not None:
            log.warning("Setting attribute on ended span.")
            return
        if self._lim.max_span_attributes == 0:
            self._dropped += len(attributes)
            return
        cleaned = _clean_attribute_value(attributes, self._lim.max_span_attribute_length)
        self._dropped += len(attributes) - len(cleaned)
        for k, v in cleaned.items():
            self._put_attribute(k, v)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if self._ended("_add_event"):
            return
        maxn = self._lim.max_events
        if maxn is not None and len(self._events) == maxn:  # BoundedList: the oldest goes
            self._events.pop(0)
            self._dropped_events += 1
        self._events.append((name, time.time_ns() if timestamp is None else timestamp,
                             _bounded(attributes, self._lim.max_event_attributes, self._lim.max_attribute_length)))

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        if not (context and (context.is_valid or (attributes or context.trace_state))) or self._ended("_add_link"):
            return
        maxn = self._lim.max_links
        if maxn is not None and len(self._links) == maxn:
            self._links.pop(0)
            self._dropped_links += 1
        self._links.append((_ctx(context), _bounded(attributes, self._lim.max_link_attributes, self._lim.max_attribute_length)))

    def update_name(self, name: str) -> None:
        if not self._ended("update_name"):
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """The SDK's rules: OK is final, UNSET is ignored; a Status's own description wins (with a WARNING)."""
        if self._ended("set_status"):
            return
        if isinstance(status, Status):
            if self._status.status_code is StatusCode.OK or status.status_code is StatusCode.UNSET:
                return
            if description is not None:
                log.warning("Description %s ignored. Use either `Status` or `(StatusCode, Description)`", description)
            self._status = status
        elif isinstance(status, StatusCode):
            if self._status.status_code is StatusCode.OK or status is StatusCode.UNSET:
                return
            self._status = Status(status, description)

    def record_exception(self, exception: BaseException, attributes: Any = None, timestamp: int | None = None,
                         escaped: bool = False) -> None:
        """The SDK's `exception` event (type, message, stack trace, escaped), `attributes` over them."""
        module, qualname = type(exception).__module__, type(exception).__qualname__
        attrs = {"exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
                 "exception.message": str(exception),
                 "exception.stacktrace": "".join(traceback.format_exception(exception)),
                 "exception.escaped": str(escaped)}
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            log.warning("Calling end() on an ended span.")
            return
        self._end = end_time if end_time is not None else time.time_ns()
        st = self._status
        self._proc.put((self._name, _ctx(self._ctx), _ctx(self._parent), self._kind.value, self._start, self._end,
                        (self._attrs, self._dropped), self._events, self._dropped_events, self._links,
                        self._dropped_links, st.status_code.value, st.description, _scope(self._scope)))

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        """As the SDK's span with its defaults: an exception is recorded (escaped) and sets ERROR."""
        if exc_val is not None and self.is_recording():
            self.record_exception(exc_val, escaped=True)
            self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        self.end()


def write_msg(out: BinaryIO, msg: Any) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def read_msg(inp: BinaryIO) -> Any:
    """The next message, or None at end of input."""
    head = inp.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    data = inp.read(n)
    return pickle.loads(data) if len(data) == n else None


def _env_positive(name: str, default: int) -> int:
    """A positive integer `OTEL_BSP_*` value (ValueError naming the variable otherwise, as the SDK's
    own BatchSpanProcessor refuses it)."""
    raw = os.environ.get(name, "")
    try:
        value = int(raw) if raw.strip() else default
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name}={raw[:40]!r}: must be a positive integer")
    return value


def bsp_settings() -> tuple[float, int, int]:
    """(schedule delay in s, max queue, max batch) from `OTEL_BSP_*`; ValueError naming a bad one."""
    delay_s = _env_positive("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
    max_queue = _env_positive("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
    max_batch = _env_positive("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
    if max_batch > max_queue:
        raise ValueError(f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={max_batch} exceeds OTEL_BSP_MAX_QUEUE_SIZE={max_queue}")
    return delay_s, max_queue, max_batch


class _ChildLink:
    """The pipe to the export child, with delivery: every message carries a sequence number the child
    answers (one line) once it has exported it; a batch not yet answered when the child dies goes to
    the next child (at least once: the collector stores a span once, whatever the repeats). At most
    `max_spans` spans wait for an answer; older batches beyond that are dropped, with a WARNING."""

    def __init__(self, config: dict[str, Any], max_spans: int):
        self._config, self._max_spans = config, max_spans
        self._seq = 0
        self._unacked: dict[int, list[tuple]] = {}
        self._acked = 0
        self._buf = b""
        self._child: subprocess.Popen | None = None
        # The child's spool, as its last answer said: spans dropped (since it started, summed over
        # children: `_dropped_before` holds the dead ones') and spans waiting on disk.
        self.spool_dropped = 0
        self.spooled = 0
        self._dropped_before = 0
        self._spawn()

    def _spawn(self) -> None:
        path = os.pathsep.join(filter(None, [str(_ROOT), str(_ROOT / "gen"), os.environ.get("PYTHONPATH")]))
        # Its own session: a terminal's Ctrl-C stops the parent, whose shutdown then flushes the child.
        self._child = child = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": path},
                                               start_new_session=True)
        os.set_blocking(child.stdout.fileno(), False)
        self._buf = b""
        self._dropped_before += self.spool_dropped
        self.spool_dropped = 0
        write_msg(child.stdin, self._config)
        for seq, batch in list(self._unacked.items()):  # what the last child did not confirm
            write_msg(child.stdin, ("spans", seq, batch))

    def spool_dropped_total(self) -> int:
        """Spans the children's spools dropped (full or aged out) since this process started."""
        return self._dropped_before + self.spool_dropped

    def pending(self) -> bool:
        """Batches the child has not confirmed yet."""
        return bool(self._unacked)

    def unconfirmed_spans(self) -> int:
        """Spans handed to the child (or waiting for the next one) that it has not confirmed (read from
        another thread: a copy of the batches first)."""
        return sum(len(b) for b in list(self._unacked.values()))

    def alive(self) -> bool:
        """Reaps a child that died (no zombie waits for the next batch)."""
        return self._child is not None and self._child.poll() is None

    def send(self, kind: str, batch: list[tuple] | None = None) -> int:
        """Hand one message to the child (starting another if it died); its sequence number."""
        self._seq += 1
        if batch is not None:
            self._unacked[self._seq] = batch
            self._bound()
        for attempt in (1, 2):
            try:
                if not self.alive():
                    if self._child is not None:
                        log.warning("span export process (pid %s) is gone; starting another (%d spans to resend)",
                                    self._child.pid, sum(map(len, self._unacked.values())))
                    self._spawn()
                    if batch is not None:
                        return self._seq  # sent by _spawn with the other unconfirmed batches
                write_msg(self._child.stdin, (kind, self._seq, batch))
                return self._seq
            except OSError:
                if attempt == 2:
                    log.warning("span export process cannot be started again; %d spans wait",
                                sum(map(len, self._unacked.values())))
                self._child = None if attempt == 2 else self._child
        return self._seq

    def _bound(self) -> None:
        while sum(map(len, self._unacked.values())) > self._max_spans and len(self._unacked) > 1:
            seq = next(iter(self._unacked))
            log.warning("%d spans dropped: the span export process has not confirmed them",
                        len(self._unacked.pop(seq)))

    def read_acks(self, wait_for: int = 0, timeout_s: float = 0.0) -> bool:
        """Take the child's answers so far; with `wait_for`, until it answered that sequence number
        (or `timeout_s` passed, or it died). True when it has answered `wait_for`."""
        deadline = time.monotonic() + timeout_s
        while self._child is not None:
            out = self._child.stdout
            try:
                data = os.read(out.fileno(), 65536)
            except BlockingIOError:
                data = None
            if data:
                self._buf += data
                *lines, self._buf = self._buf.split(b"\n")
                for line in lines:
                    seq, *spool = line.split()
                    self._acked = max(self._acked, int(seq))
                    if len(spool) == 2:
                        self.spool_dropped, self.spooled = int(spool[0]), int(spool[1])
                for seq in [q for q in self._unacked if q <= self._acked]:
                    del self._unacked[seq]
                continue
            if data == b"" or self._acked >= wait_for or (left := deadline - time.monotonic()) <= 0:
                break
            select.select([out], [], [], min(left, 0.1))
        return self._acked >= wait_for

    def close(self, timeout_s: float) -> None:
        """Close the child's input (it exports what it read, then exits); kill it after `timeout_s`."""
        child, self._child = self._child, None
        if child is None:
            return
        try:
            child.stdin.close()
            child.wait(timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait()


class ProcessSpanProcessor(SpanProcessor):
    """Batches ended spans and pipes them to an exporting child process (see the module docstring).
    `resource`: the provider's; `service_name` names the child's log lines. ValueError when an
    `OTEL_BSP_*` value is not a positive integer or the batch exceeds the queue."""

    # Shutdown: how long the child may take to confirm the last spans, then to exit. Together below
    # the 15 s `make run` (services.cli) gives a stopping service, so no child outlives its stack.
    FLUSH_TIMEOUT_S = 5.0
    EXIT_TIMEOUT_S = 3.0

    def __init__(self, resource: Resource, service_name: str, spool_dir: Path | None = None,
                 spool_max_bytes: int = 0):
        """`spool_dir` / `spool_max_bytes`: where the child spools what the collector refuses, and how
        much (services.common.span_spool; None or 0: no spool, a refused batch is given up)."""
        self._delay_s, self._max_queue, self._max_batch = bsp_settings()
        self._cond = threading.Condition()
        self._queue: list[tuple] = []
        self._dropped = 0
        self._flushes: list[list] = []  # [event, confirmed?] per force_flush waiting
        self._stopping = False
        # Started now, before the service serves: a fork while gRPC threads are busy logs a warning.
        spool = {"spool_dir": str(spool_dir), "spool_max_bytes": spool_max_bytes} if spool_dir and spool_max_bytes else {}
        self._link = _ChildLink({"service": service_name, "resource": dict(resource.attributes),
                                 "schema_url": resource.schema_url, **spool}, self._max_queue)
        self._thread = threading.Thread(target=self._run, name="SpanPipe", daemon=True)
        self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        if span.context.trace_flags.sampled:
            self.put(compact(span))

    def put(self, rec: tuple) -> None:
        """Queue one `compact` tuple (a sampled span's) for the export child."""
        with self._cond:
            if self._stopping:
                return
            if len(self._queue) >= self._max_queue:
                self._dropped += 1
                return
            self._queue.append(rec)
            if len(self._queue) == self._max_batch:
                self._cond.notify()

    def unconfirmed_spans(self) -> int:
        """Spans sent to the export child that it has not confirmed exporting yet (its answers read so
        far: a confirmed batch counts until the flusher thread reads the child's answer)."""
        return self._link.unconfirmed_spans()

    def spool_state(self) -> tuple[int, int]:
        """(spans dropped by the spool since start, spans waiting in it), as the child last said."""
        return self._link.spool_dropped_total(), self._link.spooled

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """True once the child confirmed every span ended before the call (False after the timeout)."""
        waiter = [threading.Event(), False]
        with self._cond:
            self._flushes.append(waiter)
            self._cond.notify()
        return waiter[0].wait(timeout_millis / 1000) and waiter[1]

    def shutdown(self) -> None:
        """Export what is queued (FLUSH_TIMEOUT_S at most), then stop the child."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(self.FLUSH_TIMEOUT_S + self.EXIT_TIMEOUT_S + 2)

    def _run(self) -> None:
        while True:
            with self._cond:
                deadline = time.monotonic() + self._delay_s
                while (not self._stopping and not self._flushes and len(self._queue) < self._max_batch
                       and (left := deadline - time.monotonic()) > 0):
                    self._cond.wait(left)
                batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch:]
                dropped, self._dropped = self._dropped, 0
                flushes = self._flushes if not self._queue else []
                if flushes:
                    self._flushes = []
                stopping = self._stopping and not self._queue
            if dropped:
                log.warning("%d spans dropped: more than OTEL_BSP_MAX_QUEUE_SIZE=%d were waiting for export",
                            dropped, self._max_queue)
            self._link.read_acks()
            if batch:
                self._link.send("spans", batch)
            elif self._link.pending() and not self._link.alive():
                self._link.send("flush")  # a new child gets the unconfirmed batches
            if flushes or stopping:
                confirmed = self._link.read_acks(self._link.send("flush"), self.FLUSH_TIMEOUT_S)
                for waiter in flushes:
                    waiter[1] = confirmed
                    waiter[0].set()
            if stopping:
                self._link.close(self.EXIT_TIMEOUT_S)
                return


def span_export_metrics(meter: Any, provider: Any) -> None:
    """`agentfeedback.span_export.spool.dropped` (spans the spool had to drop, counter) and
    `agentfeedback.span_export.spool.spans` (spans waiting in it, gauge) of `provider`'s export
    child, on `meter` (Prometheus: `agentfeedback_span_export_spool_dropped_total`,
    `agentfeedback_span_export_spool_spans`; alert AgentFeedbackSpanSpoolDropping). Nothing when the
    provider exports on a thread."""
    from opentelemetry.metrics import Observation  # noqa: PLC0415

    procs = [p for p in getattr(getattr(provider, "_active_span_processor", None), "_span_processors", ())
             if isinstance(p, ProcessSpanProcessor)]
    if not procs:
        return
    meter.create_observable_counter(
        "agentfeedback.span_export.spool.dropped", [lambda _o: [Observation(sum(p.spool_state()[0] for p in procs))]],
        unit="{span}", description="Spans the span spool dropped (full or aged out): lost to the trace store.")
    meter.create_observable_gauge(
        "agentfeedback.span_export.spool.spans", [lambda _o: [Observation(sum(p.spool_state()[1] for p in procs))]],
        unit="{span}", description="Spans waiting in the span spool for the collector to take them.")
