"""OTLP `ExportTraceServiceRequest` bytes written straight from the compacted spans the span pipe
carries (`services.common.span_pipe.compact`), for the span export child.

Why (issue 29): the child rebuilt a `ReadableSpan` per span and ran the SDK's encoder
(`opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans`), which builds one protobuf
message object per span, attribute, value, event and link: about 85 of the child's 101 µs CPU a span.
Here each span is written as protobuf wire bytes from its tuple, with the resource, scope and
attribute-key framing encoded once.

The output decodes to the same `ExportTraceServiceRequest` the SDK's encoder builds from the same
spans (tests/unit/test_otlp_spans.py compares them over many span shapes), field for field:
- Span: trace_id, span_id, trace_state (`k=v,…`, absent when empty), parent_span_id, flags
  (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE, plus IS_REMOTE for a remote parent; the SDK writes no W3C trace
  flags there), name, kind (the SDK's SpanKind + 1), start/end time, attributes, dropped
  attributes/events/links counts, events (time, name, attributes, dropped count), links (trace_id,
  span_id, attributes, dropped count, flags from the link's own context; no trace_state, as the SDK),
  status (always present, code and message).
- Values: bool, str, int (int64), float, bytes, sequences (ArrayValue, recursively), mappings
  (KeyValueList); None is an empty AnyValue. An attribute whose value cannot be encoded (another type,
  an int outside int64) is left out with a logged error, as the SDK's `_encode_attributes` does.
- Grouping: one ResourceSpans (the child's resource) with one ScopeSpans per instrumentation scope in
  the order the scopes first appear, spans in batch order.
"""
from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from services.common.clip import clip

log = logging.getLogger(__name__)

_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# Span.flags / Link.flags (trace.proto SpanFlags): the SDK always says whether the context is remote.
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
_SMALL = [bytes([n]) for n in range(128)]


def _varint(n: int) -> bytes:
    """An unsigned varint (n < 2**64)."""
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: its tag byte(s), the length, the body."""
    n = len(body)
    return tag + (_SMALL[n] if n < 128 else _varint(n)) + body


def _text(tag: bytes, s: str) -> bytes:
    """A string field (absent when empty). A lone surrogate cannot be UTF-8: UnicodeEncodeError."""
    return _ld(tag, s.encode()) if s else b""


def _name(tag: bytes, s: str) -> bytes:
    """A span, event or status text: a lone surrogate becomes '?' (the SDK's encoder raised, and the
    whole batch failed to export, at every resend)."""
    return _ld(tag, s.encode("utf-8", "replace")) if s else b""


# Field tags (field number << 3 | wire type), named by the message and field of opentelemetry/proto.
_KV_KEY, _KV_VALUE = b"\x0a", b"\x12"  # KeyValue 1 key, 2 value
_AV_STR, _AV_BOOL, _AV_INT, _AV_DOUBLE = b"\x0a", b"\x10", b"\x18", b"\x21"  # AnyValue 1-4
_AV_ARRAY, _AV_KVLIST, _AV_BYTES = b"\x2a", b"\x32", b"\x3a"  # AnyValue 5-7
_LIST_VALUES = b"\x0a"  # ArrayValue / KeyValueList 1 values


class _Unencodable(Exception):
    pass


def _value(v: Any) -> bytes:
    """An AnyValue's body (`_encode_value` of the SDK's common encoder)."""
    if v is None:
        return b""
    if v is True:
        return b"\x10\x01"
    if v is False:
        return b"\x10\x00"
    t = type(v)
    if t is str or isinstance(v, str):
        return _ld(_AV_STR, v.encode())
    if t is int or (isinstance(v, int) and not isinstance(v, bool)):
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise _Unencodable(f"int {v} outside int64")
        return _AV_INT + _varint(v if v >= 0 else v + (1 << 64))
    if isinstance(v, bool):  # a bool subclass
        return b"\x10\x01" if v else b"\x10\x00"
    if t is float or isinstance(v, float):
        return _AV_DOUBLE + _F64.pack(v)
    if isinstance(v, bytes):
        return _ld(_AV_BYTES, v)
    if isinstance(v, Sequence):
        return _ld(_AV_ARRAY, b"".join([_ld(_LIST_VALUES, _value(x)) for x in v]))
    if isinstance(v, Mapping):
        return _ld(_AV_KVLIST, b"".join([_ld(_LIST_VALUES, _key_value(str(k), x)) for k, x in v.items()]))
    raise _Unencodable(f"Invalid type {type(v)} of value {v}")


_KEYS: dict[str, bytes] = {}  # attribute key → its KeyValue.key field (the same few keys on every span)


def _key(key: str) -> bytes:
    """KeyValue.key's field for `key`, kept for the next span (UnicodeEncodeError for a lone surrogate)."""
    head = _KEYS.get(key)
    if head is None:
        head = _text(_KV_KEY, key)
        if len(_KEYS) < 4096:
            _KEYS[key] = head
    return head


def _key_value(key: str, v: Any) -> bytes:
    return _key(key) + _ld(_KV_VALUE, _value(v))


def _attributes(tag: bytes, attrs: Mapping[str, Any]) -> bytes:
    """Every attribute as a repeated KeyValue field `tag`; one that cannot be encoded is left out
    (logged), as the SDK's `_encode_attributes` does."""
    out = []
    for k, v in attrs.items():
        try:
            if type(v) is str and len(v) < 32:  # most values: short strings, written inline (≈ half the time)
                b = v.encode()
                n = len(b)
                if n < 126:
                    head = _KEYS.get(k) or _key(k)
                    kv = head + b"\x12" + _SMALL[n + 2] + b"\x0a" + _SMALL[n] + b
                    out.append(tag + _SMALL[len(kv)] + kv if len(kv) < 128 else _ld(tag, kv))
                    continue
            out.append(_ld(tag, _key_value(k, v)))
        except (_Unencodable, UnicodeEncodeError) as err:
            log.error("Failed to encode key %s: %s", k, err)
    return b"".join(out)


def _count(tag: bytes, n: int) -> bytes:
    return tag + _varint(n) if n else b""


def _flags(ctx: tuple | None) -> bytes:
    """Span.flags (field 16) / Link.flags (6) as the SDK writes them: fixed32."""
    return _U32.pack(_HAS_IS_REMOTE | _IS_REMOTE if ctx is not None and ctx[2] else _HAS_IS_REMOTE)


def _trace_state(ctx: tuple) -> str:
    """The W3C tracestate of a compacted context (`span_pipe._ctx`: a 5th item when not empty)."""
    return ",".join(f"{k}={v}" for k, v in ctx[4]) if len(ctx) > 4 else ""


def _event(ev: tuple) -> bytes:
    name, ts, (attrs, dropped) = ev
    return b"".join((b"\x09" + _U64.pack(ts) if ts else b"", _name(b"\x12", name), _attributes(b"\x1a", attrs),
                     _count(b"\x20", dropped)))


def _link(ln: tuple) -> bytes:
    ctx, (attrs, dropped) = ln
    return b"".join((_ld(b"\x0a", ctx[0].to_bytes(16, "big")), _ld(b"\x12", ctx[1].to_bytes(8, "big")),
                     _attributes(b"\x22", attrs), _count(b"\x28", dropped), b"\x35" + _flags(ctx)))


def encode_span(rec: tuple) -> bytes:
    """One compacted span (`span_pipe.compact`) as the body of an OTLP `Span` message."""
    (name, ctx, parent, kind, start, end, (attrs, dropped_attrs), events, dropped_events, links, dropped_links,
     status_code, status_description, _scope) = rec
    status = _name(b"\x12", status_description or "") + (b"\x18" + _SMALL[status_code] if status_code else b"")
    return b"".join((
        _ld(b"\x0a", ctx[0].to_bytes(16, "big")),
        _ld(b"\x12", ctx[1].to_bytes(8, "big")),
        _text(b"\x1a", _trace_state(ctx)),
        _ld(b"\x22", parent[1].to_bytes(8, "big")) if parent is not None else b"",
        _name(b"\x2a", name),
        b"\x30" + _SMALL[kind + 1],  # SDK SpanKind INTERNAL=0 … CONSUMER=4 → SPAN_KIND_INTERNAL=1 …
        b"\x39" + _U64.pack(start) if start else b"",
        b"\x41" + _U64.pack(end) if end else b"",
        _attributes(b"\x4a", attrs),
        _count(b"\x50", dropped_attrs),
        b"".join([_ld(b"\x5a", _event(e)) for e in events]),
        _count(b"\x60", dropped_events),
        b"".join([_ld(b"\x6a", _link(ln)) for ln in links]),
        _count(b"\x70", dropped_links),
        _ld(b"\x7a", status),
        b"\x85\x01" + _flags(parent),
    ))


class RequestEncoder:
    """Writes `ExportTraceServiceRequest` bytes for batches of compacted spans on one resource
    (`attributes`: the provider's resource attributes; `schema_url`: its schema URL)."""

    def __init__(self, attributes: Mapping[str, Any], schema_url: str | None = None):
        # ResourceSpans 1 resource (Resource 1 attributes) and 3 schema_url: the same for every request.
        self._resource = _ld(b"\x0a", _attributes(b"\x0a", attributes))
        self._schema = _text(b"\x1a", schema_url or "")
        self._scopes: dict[tuple | None, bytes] = {}

    def _scope(self, scope: tuple | None) -> bytes:
        """ScopeSpans 1 scope: InstrumentationScope 1 name, 2 version, 3 attributes (`compact`'s 4th
        item, only when the scope has any)."""
        head = self._scopes.get(scope)
        if head is None:
            body = b"" if scope is None else b"".join((
                _text(b"\x0a", scope[0] or ""), _text(b"\x12", scope[1] or ""),
                _attributes(b"\x1a", dict(scope[3])) if len(scope) > 3 else b""))
            head = self._scopes[scope] = _ld(b"\x0a", body)
        return head

    def request(self, spans: Sequence[tuple[tuple | None, bytes]]) -> bytes:
        """The request for `spans`: (scope of the compacted span, `encode_span` bytes), in batch order."""
        by_scope: dict[tuple | None, list[bytes]] = {}
        for scope, body in spans:
            (by_scope.get(scope) or by_scope.setdefault(scope, [])).append(_ld(b"\x12", body))
        scope_spans = [
            _ld(b"\x12", b"".join((self._scope(scope), *bodies, _text(b"\x1a", scope[2] or "") if scope else b"")))
            for scope, bodies in by_scope.items()
        ]
        return _ld(b"\x0a", b"".join((self._resource, *scope_spans, self._schema)))

    def requests(self, batch: Sequence[tuple], max_bytes: int) -> list[RawRequest]:
        """`batch` (compacted spans) as requests whose spans take at most `max_bytes` encoded (the
        resource and scope framing come on top: `telemetry.EXPORT_REQUEST_MAX_BYTES` leaves room for
        them). A span alone over `max_bytes` is dropped with a WARNING, the others are sent (as
        `telemetry.SizeBoundedExporter` does on the export thread, there by a size bound)."""
        out: list[RawRequest] = []
        chunk: list[tuple[tuple | None, bytes]] = []
        size = 0
        for rec in batch:
            body = encode_span(rec)
            n = len(body) + 8  # its ScopeSpans.spans tag and length
            if n > max_bytes:
                log.warning("span %s (trace %032x) dropped: %d bytes exceeds the export limit of %d",
                            clip(rec[0]), rec[1][0], n, max_bytes)
                continue
            if chunk and size + n > max_bytes:
                out.append(RawRequest(self.request(chunk), len(chunk)))
                chunk, size = [], 0
            chunk.append((rec[13], body))
            size += n
        if chunk:
            out.append(RawRequest(self.request(chunk), len(chunk)))
        return out


class RawRequest:
    """An encoded `ExportTraceServiceRequest` (`body`) of `spans` spans, what the exporters below send."""

    __slots__ = ("body", "spans")

    def __init__(self, body: bytes, spans: int):
        self.body, self.spans = body, spans


def request_exporters() -> tuple[type, type]:
    """(OTLP/gRPC, OTLP/HTTP) span exporters of the SDK that send a `RawRequest` as it is: the same
    channel or session, headers, compression, timeout, retries and exporter metrics as the SDK's, with
    the encoding step replaced (opentelemetry-exporter-otlp-proto-* 1.45.2, pinned in pyproject.toml)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
    from opentelemetry.exporter.otlp.proto.http._common import RequestPayloadTooLargeError, _is_request_too_large  # noqa: PLC0415
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter  # noqa: PLC0415
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415
    from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE  # noqa: PLC0415

    class GrpcRequestExporter(OTLPSpanExporter):
        # The mixin's encoding hook, called per attempt: the stub serializes a message, so the bytes are
        # parsed once more (upb, ≈ 1 µs a span) rather than re-encoded in Python.
        def _translate_data(self, data: RawRequest) -> ExportTraceServiceRequest:  # type: ignore[override]
            return ExportTraceServiceRequest.FromString(data.body)

        def _count_data(self, data: RawRequest) -> int:  # type: ignore[override]
            return data.spans

    class HttpRequestExporter(HttpExporter):
        def export(self, data: RawRequest) -> SpanExportResult:  # type: ignore[override]
            """The SDK's `export` (1.45.2) with `encode_spans(spans).SerializePartialToString()` replaced."""
            if self._shutdown:
                log.warning("Exporter already shutdown, ignoring batch")
                return SpanExportResult.FAILURE
            with self._metrics.export_operation(data.spans) as result:
                if _is_request_too_large(data.body, self._max_request_size):
                    log.warning("Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                                len(data.body), self._max_request_size)
                    result.error = RequestPayloadTooLargeError(
                        f"Serialized span request size {len(data.body)} bytes exceeds max_request_size "
                        f"{self._max_request_size} bytes.")
                    return SpanExportResult.FAILURE
                export_result = self._client.export(data.body)
                if not export_result.success:
                    result.error = export_result.error
                    result.error_attrs = ({HTTP_RESPONSE_STATUS_CODE: export_result.status_code}
                                          if export_result.status_code is not None else None)
                    return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

    return GrpcRequestExporter, HttpRequestExporter
