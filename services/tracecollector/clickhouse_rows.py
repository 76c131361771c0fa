"""Rows of the exporter's `otel_traces` table, encoded from OTLP: values as the OpenTelemetry Collector
clickhouse exporter writes them (exporter_traces.go `pushTraceData`), sent as one Apache Arrow record
batch per INSERT (`ArrowStream`, clickhouse.ClickHouseStore.copy_spans).

Why Arrow, not the JSON lines the store sent before (bench_span_stores, process CPU per span, batches
of 2000 spans, merges stopped): the engine parses an Arrow batch for ~5 µs/span where
JSONCompactEachRow cost ~22 µs/span (INSERT into otel_traces with its skip indexes and the lookup
table's materialized view: ~13 vs ~28 µs/span), and the Python side builds columns of plain values
(pyarrow turns them into Arrow in C++) instead of one JSON document per span.

Text policy (ingest's, case F12): every U+0000 is stored as U+FFFD. Plain strings are cleaned on the
whole batch at once (a memchr over each text column's character data; pyarrow.compute rewrites only
the columns that hold a NUL); values turned into JSON text (arrays, kvlists, AgentFeedbackTypes) are
cleaned where they are made, as ingest.to_json does.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from services.tracecollector.ingest import _MAX_EXACT, any_value, to_json

# OTLP enum → pdata String() (what the exporter writes).
KIND_NAMES = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_NAMES = ("Unset", "Ok", "Error")

INSERT_COLUMNS = (
    "Timestamp", "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind", "ServiceName",
    "ResourceAttributes", "ScopeName", "ScopeVersion", "SpanAttributes", "Duration", "StatusCode",
    "StatusMessage", "Events.Timestamp", "Events.Name", "Events.Attributes", "Links.TraceId", "Links.SpanId",
    "Links.TraceState", "Links.Attributes",
)
# AgentFeedbackTypes' "d": what of the span was not stored, counted (OTLP's dropped_* fields, the
# sender's plus our limits'), each key present only when not 0: "a" the span's dropped attributes, "ev"
# its dropped events, "ln" its dropped links, "ea" / "la" {event / link index: its dropped attributes},
# "r" its resource's dropped attributes (OTLP Resource.dropped_attributes_count).
# In that JSON column, not columns of their own, because the exporter's schema has none and the trace
# table's materialized view (0031) already copies the column into GetTrace's one-statement read: new
# columns would mean rewriting that view, and spans inserted while it is replaced would miss the table.
DROPPED_KEYS = ("a", "ev", "ln", "ea", "la", "r")
# What our receiver writes: the exporter's columns and ours (migration 0007).
COLUMNS = (*INSERT_COLUMNS, "AgentFeedbackTypes")
# Positions in a row of what ExporterRowEncoder.over reads.
_SPAN_NAME, _SPAN_ATTRIBUTES = COLUMNS.index("SpanName"), COLUMNS.index("SpanAttributes")
_EVENT_NAMES, _EVENT_ATTRIBUTES = COLUMNS.index("Events.Name"), COLUMNS.index("Events.Attributes")
_LINK_ATTRIBUTES = COLUMNS.index("Links.Attributes")
_TRACE_STATE, _STATUS_MESSAGE = COLUMNS.index("TraceState"), COLUMNS.index("StatusMessage")
_LINK_STATES = COLUMNS.index("Links.TraceState")
# DateTime64(9) holds [1900-01-01, 2262-04-11]; OTLP event times are uint64 ns: clamped into it.
_MAX_NS = 2**63 - 1

_MAP = pa.map_(pa.string(), pa.string())  # ClickHouse reads it into Map(LowCardinality(String), String)
_TIME = pa.timestamp("ns", "UTC")  # → DateTime64(9)
_STR = pa.string()
_TYPES = (_TIME, _STR, _STR, _STR, _STR, _STR, _STR, _STR, _MAP, _STR, _STR, _MAP, pa.uint64(), _STR, _STR,
          pa.list_(_TIME), pa.list_(_STR), pa.list_(_MAP), pa.list_(_STR), pa.list_(_STR), pa.list_(_STR),
          pa.list_(_MAP), _STR)
SCHEMA = pa.schema([pa.field(n, t, nullable=False) for n, t in zip(COLUMNS, _TYPES, strict=True)])
ARROW_FORMAT = "ArrowStream"


# --- values: OTLP AnyValue → the exporter's string form --------------------------------------


def _go_float(d: float) -> str:
    """strconv.FormatFloat(d, 'f', -1, 64), pcommon's AsString for a double."""
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "+Inf" if d > 0 else "-Inf"
    r = repr(d)  # the shortest round-trip digits, as Go's -1 precision: only the notation differs
    if "e" not in r:
        return r[:-2] if r.endswith(".0") else r
    return format(Decimal(r).normalize(), "f")


def as_string(v: object) -> str:
    """pcommon.Value.AsString() of the attribute whose JSON form (ingest.any_value) is `v`."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float(v)
    if v is None:
        return ""
    return orjson.dumps(v).decode()  # array / kvlist: Go's encoding/json of AsRaw(), compact


def split_attributes(attrs: dict[str, object]) -> tuple[dict[str, str], dict[str, object]]:
    """(the exporter's Map(String, String), the values whose JSON the Map's strings do not give back)."""
    strings: dict[str, str] = {}
    typed: dict[str, object] = {}
    for k, v in attrs.items():
        if type(v) is str:
            strings[k] = v
        else:
            strings[k] = s = as_string(v)
            if s != v:
                typed[k] = v
    return strings, typed


def string_map(kvs) -> tuple[dict[str, str], dict[str, object] | None]:
    """OTLP attributes as the exporter's Map(String, String) (AsString of each value; a repeated key
    keeps its last value) and the values whose JSON form (ingest.any_value) that string does not give
    back (None: none). One pass over the attributes: the hot loop of ClickHouse ingest.

    A NUL in an array or kvlist is cleaned here (its JSON text is not a plain string the batch cleaning
    sees); a NUL in a plain string is left to `arrow_payload`."""
    out: dict[str, str] = {}
    typed: dict[str, object] | None = None
    for kv in kvs:
        v = kv.value
        if s := v.string_value:
            out[kv.key] = s
            if typed is not None:
                typed.pop(kv.key, None)
            continue
        k = kv.key
        if (i := v.int_value) and -_MAX_EXACT <= i <= _MAX_EXACT:
            j: object = i
            s = str(i)
        else:
            j = any_value(v)
            if type(j) is str:  # '', bytes (base64), an int beyond ±2^53: the string is the JSON form
                out[k] = j
                if typed is not None:
                    typed.pop(k, None)
                continue
            s = as_string(j)
            if "\\u0000" in s:  # a NUL inside an array / kvlist: stored as U+FFFD, as ingest.to_json does
                j = orjson.loads(to_json(j))
                s = as_string(j)
        out[k] = s
        if typed is None:
            typed = {}
        typed[k] = j
    return out, typed


# --- rows --------------------------------------------------------------------------------------

_NO_LIST: list = []


class ExporterRowEncoder:
    """ingest.RowEncoder for the exporter's table: each span straight from OTLP to one tuple of COLUMNS'
    values (`arrow_payload` turns a batch of them into columns): ids in lowercase hex, kind and status
    as pdata's String(), attribute maps from `string_map`, the resource's map made once per
    ResourceSpans, AgentFeedbackTypes as compact JSON {"s", "r", "e", "l"} of the typed values ('' for
    none; migration 0007) and "d", the dropped counts (DROPPED_KEYS) that are not 0."""

    attributes = staticmethod(string_map)

    def resource(self, attributes: dict[str, object], dropped_attributes_count: int
                 ) -> tuple[dict[str, str], dict | None, int]:
        strings, typed = split_attributes(attributes)
        for k, v in typed.items():
            if isinstance(v, (list, dict)) and "\\u0000" in strings[k]:
                typed[k] = v = orjson.loads(to_json(v))
                strings[k] = as_string(v)
        return strings, typed or None, dropped_attributes_count

    def span(self, sp, attrs: tuple[dict[str, str], dict | None], parent_span_id: bytes | None, service: str,
             scope: str, resource: tuple[dict[str, str], dict | None, int]) -> tuple:
        strings, typed = attrs
        types: dict[str, object] | None = None
        # The dropped counts (DROPPED_KEYS), only those not 0: the common span writes none.
        dropped: dict[str, object] | None = None
        if sp.dropped_attributes_count or sp.dropped_events_count or sp.dropped_links_count:
            dropped = {k: c for k, c in (("a", sp.dropped_attributes_count), ("ev", sp.dropped_events_count),
                                         ("ln", sp.dropped_links_count)) if c}
        if resource[2]:
            dropped = dropped or {}
            dropped["r"] = resource[2]
        if typed:
            types = {"s": typed}
        if resource[1]:
            types = types or {}
            types["r"] = resource[1]
        events = sp.events
        if events:
            ev_ts, ev_names, ev_attrs, ev_typed = [], [], [], {}
            for i, e in enumerate(events):
                t = e.time_unix_nano
                ev_ts.append(t if t <= _MAX_NS else _MAX_NS)
                ev_names.append(e.name)
                a, t = string_map(e.attributes) if e.attributes else ({}, None)
                ev_attrs.append(a)
                if t:
                    ev_typed[str(i)] = t
                if e.dropped_attributes_count:
                    dropped = dropped or {}
                    dropped.setdefault("ea", {})[str(i)] = e.dropped_attributes_count
            if ev_typed:
                types = types or {}
                types["e"] = ev_typed
        else:
            ev_ts = ev_names = ev_attrs = _NO_LIST
        links = sp.links
        if links:
            ln_tids, ln_sids, ln_states, ln_attrs, ln_typed = [], [], [], [], {}
            for i, ln in enumerate(links):
                ln_tids.append(ln.trace_id.hex())
                ln_sids.append(ln.span_id.hex())
                ln_states.append(ln.trace_state)
                a, t = string_map(ln.attributes)
                ln_attrs.append(a)
                if t:
                    ln_typed[str(i)] = t
                if ln.dropped_attributes_count:
                    dropped = dropped or {}
                    dropped.setdefault("la", {})[str(i)] = ln.dropped_attributes_count
            if ln_typed:
                types = types or {}
                types["l"] = ln_typed
        else:
            ln_tids = ln_sids = ln_states = ln_attrs = _NO_LIST
        if dropped:
            types = types or {}
            types["d"] = dropped
        start = sp.start_time_unix_nano
        kind = sp.kind
        status = sp.status
        code = status.code
        return (
            start, sp.trace_id.hex(), sp.span_id.hex(), parent_span_id.hex() if parent_span_id else "",
            sp.trace_state, sp.name, KIND_NAMES[kind] if 0 <= kind < 6 else "", service, resource[0], scope, "",
            strings, sp.end_time_unix_nano - start, STATUS_NAMES[code] if 0 <= code < 3 else "", status.message,
            ev_ts, ev_names, ev_attrs, ln_tids, ln_sids, ln_states, ln_attrs, to_json(types) if types else "",
        )


    @staticmethod
    def over(row: tuple, limits) -> bool:
        """ingest.RowEncoder.over: the span's, its events' and links' attribute maps (every value as the
        string it is stored as, never shorter than the value: an array's or kvlist's is its JSON), names,
        status message and trace states, and how many events and links, against `limits` (limits.Limits)."""
        n, count = limits.value_length, limits.count
        if len(row[_EVENT_NAMES]) > limits.events or len(row[_LINK_ATTRIBUTES]) > limits.links:
            return True
        strings = row[_SPAN_ATTRIBUTES]
        if len(strings) > count or len(row[_SPAN_NAME]) > limits.name_length or (
                strings and (max(map(len, strings.values())) > n or max(map(len, strings)) > n)) or (
                len(row[_STATUS_MESSAGE]) > n or len(row[_TRACE_STATE]) > n):
            return True
        states = row[_LINK_STATES]
        if states and max(map(len, states)) > n:
            return True
        for maps in (row[_EVENT_ATTRIBUTES], row[_LINK_ATTRIBUTES]):  # (empty lists without events, links)
            for a in maps:
                if len(a) > count or (a and (max(map(len, a.values())) > n or max(map(len, a)) > n)):
                    return True
        names = row[_EVENT_NAMES]
        return bool(names) and max(map(len, names)) > n


# --- the batch -----------------------------------------------------------------------------------


_NUL = re.compile(b"\x00")


def _nul_free(arr: pa.Array) -> pa.Array:
    """`arr` with U+0000 → U+FFFD in every string it holds (strings, lists and maps of them); `arr`
    itself when it holds none (the common case: one scan of each string buffer)."""
    t = arr.type
    if pa.types.is_string(t):
        # A NUL is a zero byte in the character data (UTF-8 has no other): one memchr over the buffer
        # (re searches a buffer without copying it), not a compute kernel per column (~1 µs per span
        # on the bench payload's 13 text arrays, ~0.05 this way).
        data = arr.buffers()[2]
        if data is None or _NUL.search(data) is None:
            return arr
        return pc.replace_substring(arr, "\x00", "\ufffd")
    if pa.types.is_map(t):
        keys, items = arr.keys, arr.items
        k, v = _nul_free(keys), _nul_free(items)
        if k is keys and v is items:
            return arr
        return pa.MapArray.from_arrays(arr.offsets, k, v, type=t)
    if pa.types.is_list(t):
        values = arr.flatten()
        v = _nul_free(values)
        return arr if v is values else pa.ListArray.from_arrays(arr.offsets, v, type=t)
    return arr


_RESOURCE = COLUMNS.index("ResourceAttributes")
# Columns that can hold a NUL: not the hex ids, the enum names, ServiceName / ScopeName (flatten cleans
# them), ScopeVersion ('') or AgentFeedbackTypes (ingest.to_json's text).
_TEXT = frozenset(COLUMNS.index(c) for c in (
    "TraceState", "SpanName", "ResourceAttributes", "SpanAttributes", "StatusMessage", "Events.Name",
    "Events.Attributes", "Links.TraceState", "Links.Attributes"))


def _shared_maps(maps: tuple[dict[str, str], ...]) -> pa.Array:
    """A Map column whose rows share few dicts (one per ResourceSpans): each distinct dict converted
    once, then repeated by index in C++."""
    distinct = {id(m): m for m in maps}
    if len(distinct) == len(maps):
        return pa.array(maps, type=_MAP)
    at = {k: i for i, k in enumerate(distinct)}
    return pa.array(distinct.values(), type=_MAP).take(pa.array([at[id(m)] for m in maps], type=pa.int32()))


def warm_up() -> None:
    """Pay pyarrow's one-time cost of converting Python values now: its first `pa.array` imports its
    pandas shim, and pandas itself when installed (chdb, the test engine, requires it): ~0.4 s of CPU,
    ~400 modules. Left to the first INSERT, it stalled the event loop, so every Export in flight, for
    about a second under load (bench_span_stores: 20 of a 20,000-span ingest's ~45 µs of main-thread
    CPU per span). The store calls it when it is made."""
    pa.array([0], type=pa.int64())


def arrow_payload(rows) -> bytes:
    """`rows` (ExporterRowEncoder tuples) as one Arrow IPC stream of SCHEMA (ClickHouse's ArrowStream
    input: one record batch, one INSERT), U+0000 stored as U+FFFD."""
    columns = [_shared_maps(c) if i == _RESOURCE else pa.array(c, type=t)
               for i, (c, t) in enumerate(zip(zip(*rows, strict=True), _TYPES, strict=True))]
    for i in _TEXT:
        columns[i] = _nul_free(columns[i])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SCHEMA) as w:
        w.write_batch(pa.record_batch(columns, schema=SCHEMA))
    return sink.getvalue().to_pybytes()
