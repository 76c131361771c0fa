"""Ingest domain: OTLP span validation and flattening into storage rows (the bounded group-commit
writer they go to is `writer.py`).

No gRPC, HTTP or asyncpg here: the OTLP handlers (otlp_grpc.py, otlp_http.py) call `Ingestor.export`,
and the writer is handed the repository's COPY function.

Rules (OTLP specification, opentelemetry-proto `docs/specification.md`; docs/architecture.md "Spans"):
- Per span: trace_id 16 non-zero bytes, span_id 8 non-zero bytes, parent_span_id empty or 8 bytes,
  start_time_unix_nano non-zero, end ≥ start, start inside the retention window
  [`Window.oldest_ns`, `Window.newest_ns`). A bad span is rejected through
  `partial_success.rejected_spans` + `error_message`; the others are stored.
- An empty request (no spans) is a success (OTLP "Full Success").
- The response is sent only after the COPY holding the spans committed (`writer.BatchWriter.write`).
- Over capacity (write queue full, counted in spans): `Overloaded` → gRPC UNAVAILABLE + RetryInfo,
  HTTP 503 + Retry-After (OTLP "Throttling").

Text policy (case F12): PostgreSQL `text`/`jsonb` cannot hold U+0000, which OTLP strings may carry.
Every U+0000 in a stored string (span name, status message, scope, attribute keys and values,
event names…) is stored as U+FFFD REPLACEMENT CHARACTER: `"ok\\x00bad"` reads back `"ok\\ufffdbad"`.
The span is kept; the Export never fails because of it.

AnyValue → JSON (stored in jsonb, returned as google.protobuf.Struct by GetTrace): string → string,
bool → bool, int → number (outside ±2^53, where a JSON/Struct double loses digits, → decimal string),
double → number (NaN/±Infinity → "NaN"/"Infinity"/"-Infinity"), array → list, kvlist → object,
bytes → base64 string (RFC 4648 §4), empty → null.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import orjson
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from services.tracecollector import limits as attribute_limits
from services.tracecollector.limits import Limits, Tally
from services.tracecollector.writer import BatchWriter, Row

log = logging.getLogger(__name__)

NS_PER_S = 1_000_000_000
NS_PER_DAY = 86_400 * NS_PER_S
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_MAX_EXACT = 2**53
_REPLACEMENT = "\ufffd"
# A JSON-escaped U+0000 (`\u0000`) not itself preceded by an escaping backslash.
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")



def _json_encode(value: object) -> str:
    """Compact UTF-8 JSON. orjson: 2.5x less CPU per span than the standard library's encoder (JSON
    encoding was most of `flatten`, which bounds ingest; issue 17). Values come from `any_value`, so no
    NaN/Infinity and no integer beyond ±2^53 reaches it."""
    return orjson.dumps(value).decode()

# Spans that may carry an evaluation (issue 24, evaluations.py): the OpenTelemetry GenAI event's name and
# the first OpenInference annotation's key. Flatten marks such spans with one lookup per span.
EVALUATION_EVENT = "gen_ai.evaluation.result"
FIRST_ANNOTATION_NAME = "annotations.0.annotation.name"

# Column order of a storage row (repository.SPAN_COLUMNS mirrors it).
ROW_FIELDS = (
    "trace_id", "span_id", "parent_span_id", "start_ns", "end_ns", "name", "kind", "status_code",
    "status_message", "service_name", "scope_name", "trace_state", "attributes", "resource_attributes",
    "events", "links", "dropped_attributes_count", "dropped_events_count", "dropped_links_count",
    "resource_dropped_attributes_count",
)

# --- time window -------------------------------------------------------------------------------


def day_start_ns(day: datetime) -> int:
    """Nanoseconds since the epoch of `day` 00:00 UTC (`day`: an aware or naive-UTC datetime/date)."""
    d = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return int(d.timestamp()) * NS_PER_S


def utc_day(ns: int) -> datetime:
    """The UTC day (a midnight datetime) holding the instant `ns` (nanoseconds since the epoch)."""
    return datetime.fromtimestamp(ns // NS_PER_DAY * 86_400, UTC)


@dataclass(frozen=True)
class Window:
    """Span start times the collector stores: [oldest_ns, newest_ns).

    `oldest_ns` is `first_retained_day_ns(now, retention_days)`: the first UTC midnight not older than
    `retention_days` × 24 h, which is exactly where the partitions retention keeps begin;
    `newest_ns` is now + the allowed future skew.
    """

    oldest_ns: int
    newest_ns: int

    @classmethod
    def at(cls, now_ns: int, retention_days: int, max_future_skew_s: int) -> Window:
        return cls(first_retained_day_ns(now_ns, retention_days), now_ns + max_future_skew_s * NS_PER_S)


def first_retained_day_ns(now_ns: int, retention_days: int) -> int:
    """00:00 UTC of the oldest day kept: the first midnight at or after now − `retention_days` × 24 h.

    So a day is dropped as soon as any instant of it is older than the retention period: no span
    older than `retention_days` days survives a pass, and every span at most `retention_days` − 1
    days old is kept (case F18: spans past 14 days gone, 13-day-old spans stay). Spans between
    13 and 14 days old go with their day.
    """
    cutoff = now_ns - retention_days * NS_PER_DAY
    return -(-cutoff // NS_PER_DAY) * NS_PER_DAY


# --- AnyValue → JSON ---------------------------------------------------------------------------


def any_value(v) -> object:
    """The JSON form of an OTLP AnyValue (mapping in the module docstring)."""
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        i = v.int_value
        return i if -_MAX_EXACT <= i <= _MAX_EXACT else str(i)
    if kind == "bool_value":
        return v.bool_value
    if kind == "double_value":
        d = v.double_value
        return d if math.isfinite(d) else ("NaN" if math.isnan(d) else ("Infinity" if d > 0 else "-Infinity"))
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return None


def attributes_dict(kvs) -> dict[str, object]:
    """OTLP attributes as a dict (a repeated key keeps its last value).

    The hot loop of ingest (issue 17 profile: ~60% of `flatten`). Only one member of the AnyValue
    oneof is set, so a non-empty `string_value` is a string and a non-zero `int_value` an int: two
    plain field reads answer most attributes without `WhichOneof` (20% less CPU per span on the
    bench payload); empty strings, zeros and the other kinds go through `any_value`."""
    out: dict[str, object] = {}
    for kv in kvs:
        v = kv.value
        if s := v.string_value:
            out[kv.key] = s
        elif (i := v.int_value) and -_MAX_EXACT <= i <= _MAX_EXACT:
            out[kv.key] = i
        else:
            out[kv.key] = any_value(v)
    return out


def to_json(value: object) -> str:
    """Compact JSON for a jsonb column, with U+0000 stored as U+FFFD (jsonb rejects `\\u0000`)."""
    s = _json_encode(value)
    if "\\u0000" in s:
        s = _JSON_NUL.sub(r"\1\\ufffd", s)
    return s


def clean_text(s: str) -> str:
    """A string for a `text` column: U+0000 → U+FFFD."""
    return s.replace("\x00", _REPLACEMENT) if "\x00" in s else s


# --- validation + flattening -------------------------------------------------------------------

_REASONS = {
    "trace_id": "trace_id is not 16 non-zero bytes",
    "span_id": "span_id is not 8 non-zero bytes",
    "parent_span_id": "parent_span_id is neither empty nor 8 bytes",
    "start": "start_time_unix_nano is zero",
    "end": "end_time_unix_nano is before start_time_unix_nano",
    "too_old": "start time is older than the retention window",
    "future": "start time is too far in the future",
}


@dataclass
class Flattened:
    """Rows to store, and what was rejected (`rejected` spans, `error_message` for partial_success)."""

    rows: list[Row] = field(default_factory=list)
    rejected: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    first_bad: str = ""
    # (resource, scope, span) indices of accepted spans that may carry an evaluation.
    marked: list[tuple[int, int, int]] = field(default_factory=list)
    # What the attribute limits changed (limits.py): a partial_success warning, nothing rejected.
    tally: Tally = field(default_factory=Tally)

    @property
    def error_message(self) -> str:
        if not self.rejected:
            return ""
        parts = "; ".join(f"{n} {_REASONS[r]}" for r, n in self.counts.items())
        return f"rejected {self.rejected} span(s): {parts} (first: {self.first_bad})"


def count_spans(request: trace_service_pb2.ExportTraceServiceRequest) -> int:
    """Spans in an Export request (cheap: no span is decoded further)."""
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def _with_dropped(d: dict, dropped: int) -> dict:
    """An event's or link's JSON object, with its `dropped_attributes_count` only when not 0 (most are)."""
    if dropped:
        d["dropped_attributes_count"] = dropped
    return d


def _events_json(events) -> str | None:
    """[{time_unix_nano, name, attributes[, dropped_attributes_count]}] (migration 0001's `events`)."""
    if not events:
        return None
    return to_json([
        _with_dropped({"time_unix_nano": e.time_unix_nano, "name": e.name,
                       "attributes": attributes_dict(e.attributes)}, e.dropped_attributes_count)
        for e in events
    ])


def _links_json(links) -> str | None:
    """[{trace_id, span_id, trace_state, attributes[, dropped_attributes_count]}] (0001's `links`)."""
    if not links:
        return None
    return to_json([
        _with_dropped({"trace_id": ln.trace_id.hex(), "span_id": ln.span_id.hex(), "trace_state": ln.trace_state,
                       "attributes": attributes_dict(ln.attributes)}, ln.dropped_attributes_count)
        for ln in links
    ])


_I32_MAX = 2**31 - 1


def _dropped_counts(sp) -> tuple[int, int, int]:
    """The span's dropped attribute / event / link counts for the integer columns (migration 0011):
    OTLP's uint32 clamped at 2^31 - 1, which no real count reaches (one test per span)."""
    counts = (sp.dropped_attributes_count, sp.dropped_events_count, sp.dropped_links_count)
    if (counts[0] | counts[1] | counts[2]) > _I32_MAX:
        return tuple(min(c, _I32_MAX) for c in counts)  # type: ignore[return-value]
    return counts


class RowEncoder(Protocol):
    """A store's own row form, encoded straight from the OTLP span (store.SpanStore.row_encoder; None:
    the ROW_FIELDS tuples below). Same text policy: every U+0000 stored as U+FFFD."""

    def attributes(self, kvs) -> tuple[Mapping[str, object], object]:
        """One span's OTLP attributes in the encoder's form: (a mapping by attribute key, which flatten
        also reads, what else `span` needs of them). Read once per span."""

    def resource(self, attributes: dict[str, object], dropped_attributes_count: int) -> object:
        """What `span` needs of one ResourceSpans' attributes (attributes_dict form) and of its resource's
        dropped_attributes_count (the sender's plus the limits'), made once."""

    def span(self, sp, attributes: tuple[Mapping[str, object], object], parent_span_id: bytes | None,
             service: str, scope: str, resource: object) -> Row:
        """One valid span's row (`attributes` from `attributes(sp.attributes)`; `service`, `scope`
        already cleaned)."""

    def over(self, row: Row, limits: Limits) -> bool:
        """Whether the span of `row` may exceed `limits` (limits.py), from the row's own values: False
        must mean it does not."""


def flatten(request: trace_service_pb2.ExportTraceServiceRequest, window: Window,
            encoder: RowEncoder | None = None, limits: Limits | None = None) -> Flattened:
    """Validate every span of `request` and turn the valid ones into storage rows (order: ROW_FIELDS,
    or `encoder`'s rows). With `limits`, a valid span over one is first cut to them in `request`
    itself (limits.py; counted in the result's `tally`).

    Never raises for bad span data: bad spans are counted in the result (partial success).
    """
    out = Flattened()
    rows = out.rows
    append = rows.append
    oldest, newest = window.oldest_ns, window.newest_ns
    nested_guard = min(limits.value_length, 5 * limits.count) if limits is not None else 0
    for ri, rs in enumerate(request.resource_spans):
        if limits is not None:
            attribute_limits.limit_resource(rs.resource, limits, out.tally)
        res_attrs = attributes_dict(rs.resource.attributes)
        res_dropped = min(rs.resource.dropped_attributes_count, _I32_MAX)
        service = res_attrs.get("service.name", "")
        service = clean_text(service if isinstance(service, str) else str(service))
        if limits is not None and len(service) > limits.name_length:
            service = service[:limits.name_length]
            out.tally.truncated += 1
        res = encoder.resource(res_attrs, res_dropped) if encoder is not None else None
        res_json = to_json(res_attrs) if encoder is None else ""
        for si, ss in enumerate(rs.scope_spans):
            if limits is not None and (len(ss.scope.name) > limits.name_length
                                       or len(ss.scope.version) > limits.name_length):
                attribute_limits.limit_scope(ss.scope, limits, out.tally)
            scope = clean_text(ss.scope.name)
            for pi, sp in enumerate(ss.spans):
                tid = sp.trace_id
                sid = sp.span_id
                pid = sp.parent_span_id
                start = sp.start_time_unix_nano
                end = sp.end_time_unix_nano
                # The common case inline (one call less per span); `rejection` holds the rules and
                # names the reason whenever this quick test does not pass.
                if not (len(tid) == 16 and len(sid) == 8 and (not pid or len(pid) == 8) and oldest <= start < newest
                        and end >= start and tid != _ZERO_TRACE and sid != _ZERO_SPAN and start):
                    bad = rejection(tid, sid, pid, start, end, oldest, newest)
                    if bad is not None:
                        out.rejected += 1
                        out.counts[bad] = out.counts.get(bad, 0) + 1
                        if not out.first_bad:
                            out.first_bad = f"resource_spans[{ri}].scope_spans[{si}].spans[{pi}]"
                        continue
                if encoder is not None:
                    attrs = encoder.attributes(sp.attributes)
                    parent = pid if pid and pid != _ZERO_SPAN else None
                    row = encoder.span(sp, attrs, parent, service, scope, res)
                    # Limits tested on the row's own values first (the encoder's `over`: no protobuf read).
                    if limits is not None and encoder.over(row, limits) and attribute_limits.over(sp, limits):
                        attribute_limits.apply(sp, limits, out.tally)
                        attrs = encoder.attributes(sp.attributes)
                        row = encoder.span(sp, attrs, parent, service, scope, res)
                    events = sp.events
                    if FIRST_ANNOTATION_NAME in attrs[0] or (events and any(e.name == EVALUATION_EVENT for e in events)):
                        out.marked.append((ri, si, pi))
                    append(row)
                    continue
                name = sp.name
                events = sp.events
                links = sp.links
                attrs = attributes_dict(sp.attributes)
                attrs_json = to_json(attrs)
                events_json = _events_json(events) if events else None
                links_json = _links_json(links) if links else None
                status = sp.status
                message = status.message
                trace_state = sp.trace_state
                # Limits (limits.py) tested on what is built anyway: a string over the value length makes
                # its JSON longer than it, more than `count` attributes of an event or link make its JSON
                # at least 5 characters ('"":0,') per attribute; more events or links than their limits
                # is two lengths. Only then the span itself is looked at.
                if limits is not None and (
                        len(attrs_json) > limits.value_length or len(attrs) > limits.count
                        or len(name) > limits.name_length or len(events) > limits.events
                        or len(links) > limits.links
                        or len(message) > limits.value_length or len(trace_state) > limits.value_length
                        or (events_json is not None and len(events_json) > nested_guard)
                        or (links_json is not None and len(links_json) > nested_guard)) and attribute_limits.over(sp, limits):
                    attribute_limits.apply(sp, limits, out.tally)
                    name = sp.name
                    attrs = attributes_dict(sp.attributes)
                    attrs_json = to_json(attrs)
                    events_json = _events_json(events) if events else None
                    links_json = _links_json(links) if links else None
                    message = status.message
                    trace_state = sp.trace_state
                if "\x00" in name:
                    name = clean_text(name)
                if FIRST_ANNOTATION_NAME in attrs or (events and any(e.name == EVALUATION_EVENT for e in events)):
                    out.marked.append((ri, si, pi))
                append((
                    tid, sid, pid if pid and pid != _ZERO_SPAN else None, start, end, name, sp.kind,
                    status.code, clean_text(message) if message else message, service, scope,
                    clean_text(trace_state) if trace_state else trace_state,
                    attrs_json, res_json, events_json, links_json, *_dropped_counts(sp), res_dropped,
                ))
    return out


def without_rejected(
    request: trace_service_pb2.ExportTraceServiceRequest, window: Window
) -> trace_service_pb2.ExportTraceServiceRequest:
    """A copy of `request` holding only the spans `flatten` accepts (what the forwarder sends on)."""
    out = trace_service_pb2.ExportTraceServiceRequest()
    out.CopyFrom(request)
    for rs in out.resource_spans:
        for ss in rs.scope_spans:
            keep = [sp for sp in ss.spans if rejection(sp.trace_id, sp.span_id, sp.parent_span_id,
                                                       sp.start_time_unix_nano, sp.end_time_unix_nano,
                                                       window.oldest_ns, window.newest_ns) is None]
            del ss.spans[:]
            ss.spans.extend(keep)
    return out


def rejection(tid: bytes, sid: bytes, pid: bytes, start: int, end: int, oldest: int, newest: int) -> str | None:
    """Why a span is refused (the module docstring's rules), as the counter it goes to; None: valid.
    The one place those rules live (flatten and without_rejected both ask it)."""
    if len(tid) != 16 or tid == _ZERO_TRACE:
        return "trace_id"
    if len(sid) != 8 or sid == _ZERO_SPAN:
        return "span_id"
    if pid and len(pid) != 8:
        return "parent_span_id"
    if start == 0:
        return "start"
    if end < start:
        return "end"
    if start < oldest:
        return "too_old"
    if start >= newest:
        return "future"
    return None


# --- the ingest use case -----------------------------------------------------------------------


@dataclass(frozen=True)
class ExportResult:
    """What an Export answers: `rejected` spans and an English `error_message` (both 0/"" on full success;
    a message with 0 rejected is a warning: spans accepted within the attribute limits)."""

    accepted: int
    rejected: int
    error_message: str


class Ingestor:
    """Validates, stores (acknowledged after commit) and optionally forwards one Export request.

    `window()` returns the current `Window`; `forward(request)` (optional) is called with the accepted
    spans after commit and must not block (the forwarder has its own bounded queue); `encoder` makes
    the store's rows (None: ROW_FIELDS tuples).
    """

    def __init__(
        self,
        writer: BatchWriter,
        window: Callable[[], Window],
        forward: Callable[[trace_service_pb2.ExportTraceServiceRequest], None] | None = None,
        evaluations: Callable[[trace_service_pb2.ExportTraceServiceRequest, list[tuple[int, int, int]]],
                              Awaitable[None]] | None = None,
        encoder: RowEncoder | None = None,
        limits: Limits | None = None,
    ):
        self._writer = writer
        self._window = window
        self._forward = forward
        self._evaluations = evaluations
        self._encoder = encoder
        self._limits = limits

    async def export(self, request: trace_service_pb2.ExportTraceServiceRequest) -> ExportResult:
        """Store the valid spans of `request`; returns after they are committed.

        Raises `Overloaded` (nothing stored) when the write queue is full; any other exception means
        the spans were not stored.
        """
        n = count_spans(request)
        if n == 0:
            return ExportResult(0, 0, "")
        self._writer.reserve(n)
        try:
            window = self._window()
            flat = flatten(request, window, self._encoder, self._limits)
        except BaseException:
            self._writer.release(n)
            raise
        if not flat.rows:
            self._writer.release(n)
        else:
            write = self._writer.write(flat.rows, n)
            if flat.marked and self._evaluations is not None:
                # Issue 24: the evaluations these spans carry are stored before the answer, beside the spans'
                # COPY: an acknowledged Export has both committed (either failing fails the Export; the
                # exporter's retry stores the spans again, deduplicated at read, and the evaluations once).
                stored = asyncio.ensure_future(write)
                try:
                    await self._evaluations(request, flat.marked)
                finally:
                    await stored
            else:
                await write
            if self._forward is not None:
                self._forward(request if not flat.rejected else without_rejected(request, window))
        warning = flat.tally.warning(self._limits) if self._limits is not None else ""
        message = "; ".join(m for m in (flat.error_message, warning) if m)
        return ExportResult(len(flat.rows), flat.rejected, message)
