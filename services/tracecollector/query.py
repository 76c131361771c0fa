"""TraceQueryService: GetTrace and SearchTraces over the stored spans (scope `traces:read`).

The servicer only translates protos; `TraceReader` holds the rules; SQL lives in repository.py.
Values: attributes are stored as JSON (ingest.py's AnyValue mapping; on ClickHouse as the
exporter's strings plus our type column, clickhouse.py) and returned as google.protobuf.Struct
(numbers become doubles there, as Struct has no integer type).

Expired vs never recorded (GetTrace NOT_FOUND): a trace id alone does not say when the trace
happened, so without help the answer is reason TRACE_NOT_FOUND with ErrorInfo metadata
`retained_since` (RFC 3339, start of the oldest day kept): a caller that knows the turn's time can
tell. A caller may pass `time_hint`: when it falls before the retained window or on a day that
retention dropped (table `dropped_days`), the reason is TRACE_EXPIRED.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from agentfeedback.traces.v1 import traces_pb2, traces_pb2_grpc
from google.protobuf import struct_pb2

from services.common.auth import SCOPE_TRACES_READ
from services.common import pages
from services.common.errors import InvalidArgument, NotFound
from services.common.ids import (
    check_text,
    parse_timestamp,
    parse_trace_id,
)
from services.tracecollector.ingest import NS_PER_S, Window, utc_day
from services.tracecollector.store import SpanStore
from services.tracecollector.trace_budget import GET_TRACE_BUDGET_BYTES, fit, may_exceed

_SERVICE = "/agentfeedback.traces.v1.TraceQueryService/"
# Method → required scope (read by the ServiceInterceptor).
METHOD_SCOPES: dict[str, str | None] = {
    _SERVICE + "GetTrace": SCOPE_TRACES_READ,
    _SERVICE + "SearchTraces": SCOPE_TRACES_READ,
}
NS_PER_MS = 1_000_000
# SearchTraces filter limits (INVALID_ARGUMENT naming the field above them). Names and keys: 256
# code points (OpenTelemetry's recommended attribute-name / span-name sizes are far below it);
# values: 4096 code points; at most 64 attribute filters.
MAX_FILTER_NAME_CHARS = 256
MAX_FILTER_VALUE_CHARS = 4096
MAX_ATTRIBUTE_FILTERS = 64
_MAX_BIGINT = 2**63 - 1  # stored times and durations are PostgreSQL bigint nanoseconds


def timestamp_ns(ts, field_path: str) -> int:
    """A google.protobuf.Timestamp as ns since the epoch; InvalidArgument naming `field_path` when
    outside the Timestamp range (0001..9999, nanos in [0, 1e9)) — `services.common.ids.parse_timestamp`."""
    parse_timestamp(ts, field_path)
    return ts.seconds * NS_PER_S + ts.nanos


def _decoded(raw: str | dict | list | None):
    """A stored JSON value: text on PostgreSQL (jsonb read as text), already decoded on ClickHouse."""
    return json.loads(raw) if isinstance(raw, str) else raw


def _struct(raw: str | dict | None) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    if raw:
        s.update(_decoded(raw))
    return s


def span_proto(r) -> traces_pb2.Span:
    """One stored span (a store.SpanStore.get_trace mapping) as a `traces.v1.Span`."""
    sp = traces_pb2.Span(
        trace_id=bytes(r["trace_id"]).hex(),
        span_id=bytes(r["span_id"]).hex(),
        parent_span_id=bytes(r["parent_span_id"]).hex() if r["parent_span_id"] else "",
        name=r["name"],
        kind=r["kind"] if 0 <= r["kind"] <= 5 else 0,
        start_time_unix_nano=r["start_ns"],
        end_time_unix_nano=r["end_ns"],
        status_code=r["status_code"] if 0 <= r["status_code"] <= 2 else 0,
        status_message=r["status_message"],
        service_name=r["service_name"],
        scope_name=r["scope_name"],
        attributes=_struct(r["attributes"]),
        resource_attributes=_struct(r["resource_attributes"]),
        dropped_attributes_count=r["dropped_attributes_count"],
        dropped_events_count=r["dropped_events_count"],
        dropped_links_count=r["dropped_links_count"],
        resource_dropped_attributes_count=r["resource_dropped_attributes_count"],
    )
    for e in _decoded(r["events"]) or ():
        ev = sp.events.add(time_unix_nano=e["time_unix_nano"], name=e["name"],
                           dropped_attributes_count=e.get("dropped_attributes_count", 0))
        ev.attributes.update(e["attributes"])
    for ln in _decoded(r["links"]) or ():
        lk = sp.links.add(trace_id=ln["trace_id"], span_id=ln["span_id"],
                          dropped_attributes_count=ln.get("dropped_attributes_count", 0))
        lk.attributes.update(ln["attributes"])
    return sp


@dataclass(frozen=True)
class SearchParams:
    """A validated SearchTraces request (times in ns since the epoch)."""

    start_ns: int
    end_ns: int
    service_name: str
    span_name: str
    attributes: dict[str, str]
    status_code: int | None
    min_duration_ns: int
    page_size: int
    after: tuple[int, bytes] | None

    @staticmethod
    def filters(req: traces_pb2.SearchTracesRequest) -> list:
        """The filters a page token is bound to (`services.common.pages`: a token is only valid for
        the same query). Call on a request `parse` accepted."""
        return [timestamp_ns(req.start_time, "start_time"), timestamp_ns(req.end_time, "end_time"),
                req.service_name, req.span_name, sorted(req.attributes.items()), req.status_code,
                req.min_duration_ms]

    @classmethod
    def parse(cls, req: traces_pb2.SearchTracesRequest, max_days: int) -> SearchParams:
        """Validate; InvalidArgument naming the field when a value is missing or out of range:
        `start_time`/`end_time` (missing, outside the Timestamp range, end not after start, more than
        `max_days` apart), `service_name`/`span_name` (NUL, over 256 code points), `attributes`
        (empty key, NUL, key over 256 / value over 4096 code points, over 64 filters), `status_code`
        (not a StatusCode value), `min_duration_ms` (negative), `page_size`, `page_token`.
        """
        if not req.HasField("start_time"):
            raise InvalidArgument("start_time", "is required")
        if not req.HasField("end_time"):
            raise InvalidArgument("end_time", "is required")
        start, end = timestamp_ns(req.start_time, "start_time"), timestamp_ns(req.end_time, "end_time")
        if end <= start:
            raise InvalidArgument("end_time", "must be after start_time")
        if end - start > max_days * 86_400 * NS_PER_S:
            raise InvalidArgument("end_time", f"must be at most {max_days} days (the retention window) after start_time")
        if req.min_duration_ms < 0:
            raise InvalidArgument("min_duration_ms", "must not be negative")
        check_text(req.service_name, "service_name", MAX_FILTER_NAME_CHARS)
        check_text(req.span_name, "span_name", MAX_FILTER_NAME_CHARS)
        if len(req.attributes) > MAX_ATTRIBUTE_FILTERS:
            raise InvalidArgument(
                "attributes", f"has {len(req.attributes)} filters; the limit is {MAX_ATTRIBUTE_FILTERS}",
                reason="TOO_MANY", limit=str(MAX_ATTRIBUTE_FILTERS),
            )
        for k, v in req.attributes.items():
            if not k:
                raise InvalidArgument("attributes", "keys must not be empty")
            check_text(k, "attributes", MAX_FILTER_NAME_CHARS)
            check_text(v, "attributes", MAX_FILTER_VALUE_CHARS)
        if req.status_code not in traces_pb2.StatusCode.values():
            raise InvalidArgument("status_code",
                                  f"unknown StatusCode {req.status_code} (0 UNSET, 1 OK, 2 ERROR)")
        size = pages.page_size(req.page_size, default=50, maximum=1000)
        after = None
        tok = pages.read(req.page_token, cls.filters(req))
        if tok is not None:
            try:
                after = (int(tok["s"]), bytes.fromhex(tok["t"]))
                if not (0 <= after[0] <= _MAX_BIGINT and len(after[1]) == 16):
                    raise ValueError
            except (KeyError, ValueError, TypeError):
                raise InvalidArgument("page_token", "is not a token this service issued") from None
        # Spans are stored with bigint ns in [0, 2^63): a wider range or duration matches as the clamped one.
        return cls(
            start_ns=min(max(start, 0), _MAX_BIGINT), end_ns=min(max(end, 0), _MAX_BIGINT),
            service_name=req.service_name, span_name=req.span_name,
            attributes=dict(req.attributes), status_code=req.status_code or None,
            min_duration_ns=min(req.min_duration_ms * NS_PER_MS, _MAX_BIGINT), page_size=size, after=after,
        )


class TraceReader:
    """Read rules over the span store. `window()` gives the currently retained `Window`; a GetTrace answer
    keeps at most `trace_budget_bytes` encoded (trace_budget.py)."""

    def __init__(self, repo: SpanStore, window: Callable[[], Window], max_search_days: int,
                 trace_budget_bytes: int = GET_TRACE_BUDGET_BYTES):
        self._repo = repo
        self._window = window
        self._max_days = max_search_days
        self._trace_budget = trace_budget_bytes

    async def get_trace(self, req: traces_pb2.GetTraceRequest) -> traces_pb2.Trace:
        """All spans of a trace, within the answer budget (trace_budget.py: the largest attribute values
        cut first, counted in `truncated_value_count`; measured only when the stored sizes say it could
        be over). InvalidArgument(trace_id) when malformed or zero, (time_hint) when outside the
        Timestamp range; NotFound with reason TRACE_NOT_FOUND or TRACE_EXPIRED (see module docstring)
        when no span is stored."""
        tid = parse_trace_id(req.trace_id)
        hint = timestamp_ns(req.time_hint, "time_hint") if req.HasField("time_hint") else None
        rows = await self._repo.get_trace(bytes.fromhex(tid))
        if not rows:
            raise await self._not_found(tid, hint)
        trace = traces_pb2.Trace(trace_id=tid, spans=[span_proto(r) for r in rows])
        if may_exceed(rows, self._trace_budget):
            trace.truncated_value_count = fit(trace, self._trace_budget)
        return trace

    async def _not_found(self, tid: str, hint: int | None) -> NotFound:
        oldest = self._window().oldest_ns
        since = datetime.fromtimestamp(oldest // NS_PER_S, UTC).isoformat().replace("+00:00", "Z")
        reason = "TRACE_NOT_FOUND"
        if hint is not None and (hint < oldest or await self._repo.day_dropped(utc_day(hint).date())):
            reason = "TRACE_EXPIRED"
        return NotFound(f"trace {tid}", reason=reason, trace_id=tid, retained_since=since)

    async def search(self, req: traces_pb2.SearchTracesRequest) -> traces_pb2.SearchTracesResponse:
        """Matching traces newest first, keyset-paged. InvalidArgument naming the bad field."""
        p = SearchParams.parse(req, self._max_days)
        # Only the retained window: what a retention pass has not yet dropped (and the ClickHouse
        # attribute lookup's weekly partitions, dropped a week at a time) is already expired.
        start_ns = max(p.start_ns, self._window().oldest_ns)
        if start_ns >= p.end_ns:
            return traces_pb2.SearchTracesResponse()
        ids, summaries = await self._repo.search_traces(
            start_ns=start_ns, end_ns=p.end_ns, service_name=p.service_name, span_name=p.span_name,
            attributes=p.attributes, status_code=p.status_code,
            min_duration_ns=p.min_duration_ns, after=p.after, limit=p.page_size + 1, summarize=p.page_size,
        )
        page, more = ids[: p.page_size], len(ids) > p.page_size
        kept = [(k, summaries[k[0]]) for k in page if k[0] in summaries]  # others: dropped by retention meanwhile
        items = [traces_pb2.TraceSummary(
            trace_id=tid.hex(), root_span_name=s["root_name"], service_name=s["service_name"],
            start_time_unix_nano=s["root_start"], duration_nano=s["root_duration"],
            span_count=s["span_count"], status_code=s["status_code"] if 0 <= s["status_code"] <= 2 else 0,
        ) for (tid, _), s in kept]
        n = pages.fit(items)
        out = traces_pb2.SearchTracesResponse(traces=items[:n])
        if n < len(kept):
            more, page = True, [k for k, _ in kept[:n]]
        if more:
            last_tid, last_start = page[-1]
            out.next_page_token = pages.issue({"s": last_start, "t": last_tid.hex()}, SearchParams.filters(req))
        return out


class TraceQueryServicer(traces_pb2_grpc.TraceQueryServiceServicer):
    """Thin: proto in, `TraceReader`, proto out (errors are DomainErrors mapped by the interceptor)."""

    def __init__(self, reader: TraceReader):
        self._reader = reader

    async def GetTrace(self, request, context):
        return await self._reader.get_trace(request)

    async def SearchTraces(self, request, context):
        return await self._reader.search(request)


__all__ = ["METHOD_SCOPES", "SearchParams", "TraceQueryServicer", "TraceReader", "span_proto"]
