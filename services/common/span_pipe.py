"""Span export out of the serving process: `ProcessSpanProcessor` hands each ended span, as a tuple of
plain values, to a child process (`services.common.span_export_worker`) that encodes it as OTLP and
exports it with the SDK's standard exporter (the `OTEL_*` environment, as `telemetry.make_exporter`).

Why: the SDK's `BatchSpanProcessor` encodes a whole batch (≈ 32 µs a span, 512 spans at most) on a
thread of the serving process, holding the GIL for milliseconds at a time; every RPC that needed the
GIL meanwhile waited up to a switch interval (5 ms) per wait (issue 17: the periodic p99 spikes of a
chat turn and of CreateFeedback). Here the serving process only copies the span's fields into a tuple
(≈ 5 µs) and pickles a batch (≈ 3 µs a span) on its flusher thread; encoding and the gRPC call run in
the child, on its own GIL.

Semantics follow the SDK's batch processor and its `OTEL_BSP_*` variables: a batch leaves every
`OTEL_BSP_SCHEDULE_DELAY` ms (5000) or as soon as `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512) spans wait;
beyond `OTEL_BSP_MAX_QUEUE_SIZE` (2048) waiting spans, new ones are dropped and counted (a WARNING
names the count). The child exits when its input closes (its parent stopped or died), after
exporting what it read. A child that died is started again for the next batch; the batch it was
handed is lost, with a WARNING. Framing on the pipe: 4-byte big-endian length + pickle, parent to
child only (the child's stdout carries flush acknowledgements back).
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
from typing import Any, BinaryIO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")
WORKER_MODULE = "services.common.span_export_worker"


def _ctx(c: SpanContext | None) -> tuple[int, int, bool, int] | None:
    return None if c is None else (c.trace_id, c.span_id, c.is_remote, int(c.trace_flags))


def _span_ctx(t: tuple[int, int, bool, int] | None) -> SpanContext | None:
    return None if t is None else SpanContext(t[0], t[1], t[2], TraceFlags(t[3]))


def _attrs(a: Any) -> tuple[dict[str, Any], int]:
    return (dict(a), a.dropped if isinstance(a, BoundedAttributes) else 0) if a else ({}, 0)


def compact(span: ReadableSpan) -> tuple:
    """The fields of an ended span the OTLP encoder reads, as plain (picklable) values."""
    scope = span.instrumentation_scope
    return (
        span.name, _ctx(span.context), _ctx(span.parent), span.kind.value, span.start_time, span.end_time,
        (dict(span.attributes or {}), span.dropped_attributes),
        [(e.name, e.timestamp, _attrs(e.attributes)) for e in span.events], span.dropped_events,
        [(_ctx(ln.context), _attrs(ln.attributes)) for ln in span.links], span.dropped_links,
        span.status.status_code.value, span.status.description,
        (scope.name, scope.version, scope.schema_url) if scope is not None else None,
    )


def _bounded(attrs: tuple[dict[str, Any], int]) -> BoundedAttributes:
    out = BoundedAttributes(attributes=attrs[0], immutable=False)
    out.dropped = attrs[1]
    return out


def _bounded_list(items: list, dropped: int) -> BoundedList:
    out = BoundedList.from_seq(None, items)
    out.dropped = dropped
    return out


def rebuild(rec: tuple, resource: Resource) -> ReadableSpan:
    """The ReadableSpan `compact` took apart (dropped counts included), on `resource`."""
    (name, ctx, parent, kind, start, end, attrs, events, dropped_events, links, dropped_links,
     status_code, status_description, scope) = rec
    return ReadableSpan(
        name=name, context=_span_ctx(ctx), parent=_span_ctx(parent), resource=resource,
        attributes=_bounded(attrs), kind=SpanKind(kind), start_time=start, end_time=end,
        events=_bounded_list([Event(n, _bounded(a), timestamp=ts) for n, ts, a in events], dropped_events),
        links=_bounded_list([Link(_span_ctx(c), _bounded(a)) for c, a in links], dropped_links),
        status=Status(StatusCode(status_code), status_description),
        instrumentation_scope=InstrumentationScope(*scope) if scope is not None else None,
    )


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


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class ProcessSpanProcessor(SpanProcessor):
    """Batches ended spans and pipes them to an exporting child process (see the module docstring).
    `resource`: the provider's; `service_name` names the child's log lines."""

    def __init__(self, resource: Resource, service_name: str):
        self._resource_attrs = dict(resource.attributes)
        self._schema_url = resource.schema_url
        self._service = service_name
        self._delay_s = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._max_queue = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self._max_batch = _env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
        self._cond = threading.Condition()
        self._queue: list[tuple] = []
        self._dropped = 0
        self._flushes: list[threading.Event] = []
        self._stopping = False
        # Started now, before the service serves: a fork while gRPC threads are busy logs a warning.
        self._child: subprocess.Popen | None = self._spawn()
        self._thread = threading.Thread(target=self._run, name="SpanPipe", daemon=True)
        self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        if not span.context.trace_flags.sampled:
            return
        rec = compact(span)
        with self._cond:
            if self._stopping:
                return
            if len(self._queue) >= self._max_queue:
                self._dropped += 1
                return
            self._queue.append(rec)
            if len(self._queue) == self._max_batch:
                self._cond.notify()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """True once every span ended before the call has been exported by the child (or failed)."""
        done = threading.Event()
        with self._cond:
            self._flushes.append(done)
            self._cond.notify()
        return done.wait(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Export what is queued, then stop the child (its input closes; 30 s at most)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(35)

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
            if batch:
                self._send(("spans", batch))
            if flushes:
                self._flush_child()
                for f in flushes:
                    f.set()
            if stopping:
                self._stop_child()
                return

    def _spawn(self) -> subprocess.Popen:
        from services.common.settings import PROJECT_ROOT  # noqa: PLC0415 - only where a child starts

        path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), str(PROJECT_ROOT / "gen"), os.environ.get("PYTHONPATH")]))
        # Its own session: a terminal's Ctrl-C stops the parent, whose shutdown then flushes the child.
        child = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": path}, start_new_session=True)
        write_msg(child.stdin, {"service": self._service, "resource": self._resource_attrs,
                                "schema_url": self._schema_url})
        return child

    def _send(self, msg: tuple) -> bool:
        for attempt in (1, 2):
            try:
                if self._child is None or self._child.poll() is not None:
                    self._child = self._spawn()
                write_msg(self._child.stdin, msg)
                return True
            except OSError as e:
                log.warning("span export process (pid %s) is gone (%s); %s", getattr(self._child, "pid", "-"),
                            type(e).__name__, "starting another" if attempt == 1 else f"{len(msg[1])} spans lost")
                self._child = None
        return False

    def _flush_child(self, timeout_s: float = 30.0) -> None:
        """Wait until the child has exported everything it was sent (it answers one line per flush)."""
        if self._child is None or not self._send(("flush", None)):
            return
        out = self._child.stdout
        if select.select([out], [], [], timeout_s)[0]:
            out.readline()

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            child.stdin.close()
            child.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
