"""GetTrace's answer budget: a `traces.v1.Trace` is answered within `GET_TRACE_BUDGET_BYTES` of encoded
protobuf, keeping every span and cutting its largest attribute values first.

Why: gRPC clients refuse a message over 4 MiB by default (grpc.max_receive_message_length), and every
client of GetTrace keeps that default (the CLI, the console through Envoy, the feedback service's
capture worker, services/feedback/traces_client.py). Within the ingest limits (limits.py) one span can
hold about 2 MiB (128 attributes × 16 KiB values), so a trace of three such spans failed
RESOURCE_EXHAUSTED at every client: it could not be read, nor frozen into a report's evidence.

What is kept and what is cut (`fit`):
- Every span, with its structure whole: ids, parent, name, kind, times, status code, service and scope
  names, dropped counts, attribute keys. A ticket needs which spans ran, when, under which parent, and
  how they ended; a value's first kilobytes and the fact that it was longer say the rest.
- Cut first: attribute values (of spans, resources, events and links), largest first ("water-filling":
  one cap C, in encoded bytes, chosen so that cutting every value above C down to C brings the answer
  within the budget; values at or below C are untouched). A cut string keeps its start and ends with
  `services.common.clip.MARKER`, `…(+N chars)` (N: characters cut), as every clipped value does; a
  list or object value over C becomes its JSON text, cut so (a number, a bool or null is never over).
- Only when every value is down to `MIN_CUT_BYTES` and the answer is still over: event names and
  status messages, the same way.
- Never cut: the rest. A trace whose structure alone is over the budget (about 8,600 spans of our
  services, ~364 bytes each with their resource's short values; or keys and names at their 16 KiB
  limits) is answered over it.
`Trace.truncated_value_count` says how many values (and names) were cut.

Cheap test first (`may_exceed`): the spans' stored sizes, which the store already handed over (the
JSON texts' lengths on PostgreSQL, the span JSON's length on ClickHouse), bound the encoded answer from
above; only when that bound passes the budget is the built answer measured (and cut). An ordinary
trace (a few KiB a span) costs no measuring at all.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentfeedback.traces.v1 import traces_pb2
from google.protobuf import json_format

from services.common.clip import MARKER

# The encoded Trace a GetTrace answer keeps (setting AGENTFEEDBACK_COLLECTOR_GET_TRACE_BUDGET_BYTES):
# below gRPC's 4 MiB default receive limit with 1 MiB to spare, as every other answer that can grow
# (services.common.pages.RESPONSE_MAX_BYTES, services.feedback.codec_feed.RECORD_BUDGET_BYTES).
GET_TRACE_BUDGET_BYTES = 3 * 1024 * 1024
# A cut value keeps at least this many encoded bytes, its marker included (≈ 40 characters of its start:
# enough to tell what it was).
MIN_CUT_BYTES = 64
# Upper bound of encoded protobuf bytes per character of a span's stored JSON and names: a character is
# at most 4 UTF-8 bytes, and JSON's smallest items grow most as Struct Values (a one-digit number in a
# list, `0,`, is an 11-byte Value: 5.5 per character; an entry `"":0,` is 15 bytes: 3 per character).
BYTES_PER_STORED_CHAR = 6
# Bytes of a span's fixed fields in the answer beyond its stored text (ids as hex: 64; two fixed64
# times: 18; kind, status, four counts, tags and lengths: < 60), rounded up.
SPAN_FIXED_BYTES = 256
# Rounds of cutting per tier: the first cut lands within a few bytes per value of the budget (the cap is
# computed from the values' sizes, the answer re-measured after); later rounds take what is left.
_MAX_ROUNDS = 8


def stored_chars(row: Any) -> int:
    """Characters of one stored span (a store.SpanStore.get_trace mapping) that grow its answer: its names
    and its JSON values, as the text PostgreSQL hands them over (attributes and resource_attributes are
    NOT NULL), or the `stored_chars` a ClickHouse SpanRecord measured (the JSON text it was read from)."""
    attributes = row["attributes"]
    if type(attributes) is str:
        n = len(attributes) + len(row["resource_attributes"]) + len(row["events"] or "") + len(row["links"] or "")
    else:
        n = row.stored_chars
    return n + len(row["name"]) + len(row["status_message"]) + len(row["service_name"]) + len(row["scope_name"])


def may_exceed(rows: Sequence[Any], budget: int) -> bool:
    """Whether the Trace of `rows` could be over `budget` bytes encoded (False: it is not; cheap: eight
    lengths per span, nothing decoded or encoded)."""
    return sum(map(stored_chars, rows)) * BYTES_PER_STORED_CHAR + len(rows) * SPAN_FIXED_BYTES > budget


@dataclass(eq=False)
class _Piece:
    """One value or name that may be cut: `owner.field` holds it (a Value's string_value, an event's
    name, a span's status_message); `text` is its whole text (a list's or object's JSON), `size` its
    encoded bytes now."""

    owner: Any
    field: str
    text: str
    size: int
    was_cut: bool = False

    def cut(self, max_bytes: int) -> None:
        """Set the field to `text` cut so that its encoded size is at most `max_bytes`, marker included."""
        new = clipped(self.text, max_bytes - _FRAMING)
        setattr(self.owner, self.field, new)
        self.size = string_size(new)
        self.was_cut = True


# A string field's tag and length prefix: at most 1 + 3 bytes below 2 MiB.
_FRAMING = 4


def string_size(s: str) -> int:
    """Encoded bytes of a string field holding `s`: 1 tag byte, its length as a varint, its UTF-8 bytes."""
    n = len(s.encode())
    return 1 + (1 if n < 1 << 7 else 2 if n < 1 << 14 else 3 if n < 1 << 21 else 4) + n


def clipped(text: str, max_bytes: int) -> str:
    """`text` cut so that what is kept plus `…(+N chars)` (N: characters cut) is at most `max_bytes`
    UTF-8 bytes (never less than the marker alone), on a character boundary."""
    room = max(max_bytes - len(MARKER.format(len(text)).encode()), 0)
    head = text.encode()[:room].decode("utf-8", "ignore")
    return head + MARKER.format(len(text) - len(head))


def _value_piece(v) -> _Piece | None:
    """A Struct Value as a piece: strings as they are, lists and objects as their compact JSON text;
    None for numbers, bools and nulls (at most 11 bytes: never over MIN_CUT_BYTES)."""
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return _Piece(v, "string_value", v.string_value, v.ByteSize())
    if kind in ("list_value", "struct_value"):
        text = json.dumps(json_format.MessageToDict(v), ensure_ascii=False, separators=(",", ":"))
        return _Piece(v, "string_value", text, v.ByteSize())
    return None


def _values(trace: traces_pb2.Trace) -> Iterator[_Piece]:
    for sp in trace.spans:
        structs = [sp.attributes, sp.resource_attributes, *(e.attributes for e in sp.events),
                   *(ln.attributes for ln in sp.links)]
        for s in structs:
            for v in s.fields.values():
                if v.ByteSize() > MIN_CUT_BYTES and (p := _value_piece(v)) is not None:
                    yield p


def _names(trace: traces_pb2.Trace) -> Iterator[_Piece]:
    for sp in trace.spans:
        if len(sp.status_message) > MIN_CUT_BYTES // 4:
            yield _Piece(sp, "status_message", sp.status_message, string_size(sp.status_message))
        for e in sp.events:
            if len(e.name) > MIN_CUT_BYTES // 4:
                yield _Piece(e, "name", e.name, string_size(e.name))


def water_level(sizes: Sequence[int], excess: int, floor: int) -> int | None:
    """The largest cap C ≥ `floor` such that cutting every size above C down to C saves at least `excess`
    bytes (sum of size − C over sizes > C); None when even C = `floor` does not."""
    ordered = sorted(sizes, reverse=True)
    total = 0
    for k, s in enumerate(ordered, 1):
        total += s
        nxt = ordered[k] if k < len(ordered) else 0
        cap = (total - excess) // k  # k largest cut to `cap` save exactly `excess` (or more)
        if cap >= nxt:
            return cap if cap >= floor else None
    return None


def fit(trace: traces_pb2.Trace, budget: int) -> int:
    """Cut `trace` (in place) to at most `budget` encoded bytes as the module docstring says; returns how
    many values and names were cut (0 when it already fits). May stay over the budget only when its
    uncut structure is (module docstring)."""
    size = trace.ByteSize()
    if size <= budget:
        return 0
    seen: list[_Piece] = []
    for tier in (_values, _names):
        pieces = [p for p in tier(trace) if p.size > MIN_CUT_BYTES]
        seen += pieces
        for _ in range(_MAX_ROUNDS):
            if size <= budget or not pieces:
                break
            cap = water_level([p.size for p in pieces], size - budget, MIN_CUT_BYTES)
            to = MIN_CUT_BYTES if cap is None else cap
            for p in pieces:
                if p.size > to:
                    p.cut(to)
            size = trace.ByteSize()
            if cap is None:
                break  # every piece of this tier is down to MIN_CUT_BYTES: the next tier
            pieces = [p for p in pieces if p.size > MIN_CUT_BYTES]
        if size <= budget:
            break
    return sum(p.was_cut for p in seen)


__all__ = ["GET_TRACE_BUDGET_BYTES", "MIN_CUT_BYTES", "clipped", "fit", "may_exceed", "stored_chars", "water_level"]
