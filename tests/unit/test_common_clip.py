"""The shared clip helper, the error mapping's bounds and the span export budget (issue 16)."""
from __future__ import annotations

import logging

import grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from services.common.clip import ECHO_MAX_CHARS, MESSAGE_MAX_CHARS, clip, clip_message
from services.common.errors import InvalidArgument, ResourceExhausted, to_status
from services.common.telemetry import SPAN_LIMITS, SizeBoundedExporter, record_exception, setup_logging, span_size_bound
from google.rpc import error_details_pb2


def test_clip_keeps_short_values_and_marks_what_it_cut():
    assert clip("instances/abc") == "instances/abc"
    out = clip("x" * 7000)
    assert out == "x" * ECHO_MAX_CHARS + "…(+6800 chars)"
    assert clip(12345, limit=2) == "12…(+3 chars)"


def test_clip_escapes_what_a_reader_cannot_see_and_stays_bounded():
    # An update_mask path of "\u202e\x1b[31mbody\n" was echoed raw: it recoloured the CLI's terminal
    # and reversed the error text around it.
    assert clip("\u202e\x1b[31mbody\n") == "\\u202e\\x1b[31mbody\\n"
    assert clip("zero\u200bwidth\u00a0nbsp\r\tend") == "zero\\u200bwidth\\xa0nbsp\\r\\tend"
    assert clip("é ✓ \N{GRINNING FACE} back\\slash") == "é ✓ \N{GRINNING FACE} back\\slash"  # printable: as is
    out = clip("\x1b" * 7000)
    assert out == "\\x1b" * (ECHO_MAX_CHARS // 4) + f"…(+{7000 - ECHO_MAX_CHARS // 4} chars)"
    assert clip("ab\ncd", limit=4) == "ab\\n…(+2 chars)" and clip("abcdef\n", limit=3) == "abc…(+4 chars)"
    assert clip_message("line one\nline two") == "line one\nline two"  # the service's own line breaks stay


def test_a_status_built_from_huge_client_values_stays_small_and_keeps_its_code():
    err = InvalidArgument("update_mask", f"`{'p' * 7000}` cannot be updated", extra="m" * 5000)
    st = to_status(err)
    assert st.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    # gRPC's client-side metadata hard limit is 16 KiB; the status rides base64-encoded in it.
    assert len(st.SerializeToString()) * 4 / 3 < 8 * 1024
    assert len(st.message) <= MESSAGE_MAX_CHARS + 20 and "…(+" in st.message


def test_resource_exhausted_carries_retry_info_and_quota_failure():
    st = to_status(ResourceExhausted("over quota", reason="WRITE_QUOTA_EXCEEDED", retry_after_s=2.5,
                                     quota=(("owner:alice", "240 writes per 60 s"),)))
    kinds = [d.type_url.rsplit("/", 1)[1] for d in st.details]
    assert kinds == ["google.rpc.ErrorInfo", "google.rpc.RetryInfo", "google.rpc.QuotaFailure"]
    ri = error_details_pb2.RetryInfo()
    st.details[1].Unpack(ri)
    assert ri.retry_delay.ToMilliseconds() == 2500


class _Recorder(SpanExporter):
    def __init__(self):
        self.requests: list[int] = []

    def export(self, spans):
        self.requests.append(len(spans))
        return SpanExportResult.SUCCESS


def _spans(n: int, value_chars: int):
    rec = _Recorder()
    tp = TracerProvider(span_limits=SPAN_LIMITS)
    tp.add_span_processor(SimpleSpanProcessor(rec))
    tr = tp.get_tracer("t")
    out = []
    for i in range(n):
        s = tr.start_span(f"s{i}", attributes={f"a{j}": "v" * value_chars for j in range(64)})
        s.end()
        out.append(s)
    return out


def test_span_limits_bound_every_span_below_the_export_budget():
    """The worst span the SDK limits allow (every count and length at its maximum, 4-byte characters)."""
    tp = TracerProvider(span_limits=SPAN_LIMITS)
    big = "\U0001F600" * 100_000
    attrs = {f"a{j}": big for j in range(100)}
    from opentelemetry.trace import Link, SpanContext  # noqa: PLC0415

    links = [Link(SpanContext(i + 1, i + 1, False), attributes=attrs) for i in range(20)]
    span = tp.get_tracer("t").start_span("s", attributes=attrs, links=links)
    for _ in range(40):
        span.add_event("e", attributes=attrs)
    span.end()
    assert all(len(v) == 2048 for v in span.attributes.values())
    assert len(span.attributes) == 64 and len(span.events) == 16 and len(span.links) == 8
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: PLC0415

    encoded = encode_spans([span]).ByteSize()
    assert encoded <= span_size_bound(span) < 3 * 1024 * 1024


def test_a_batch_is_split_into_requests_under_the_budget_and_nothing_is_lost():
    spans = _spans(40, 2048)
    rec = _Recorder()
    exp = SizeBoundedExporter(rec, max_bytes=1024 * 1024)
    assert exp.export(spans) is SpanExportResult.SUCCESS
    assert sum(rec.requests) == 40 and len(rec.requests) > 1
    per_span = span_size_bound(spans[0])
    assert max(rec.requests) * per_span <= 1024 * 1024


def test_record_exception_clips_message_and_stack(caplog):
    tp = TracerProvider(span_limits=SPAN_LIMITS)
    span = tp.get_tracer("t").start_span("s")
    try:
        raise ValueError("v" * 100_000)
    except ValueError as e:
        record_exception(span, e)
    ev = span.events[0]
    assert ev.name == "exception"
    assert len(ev.attributes["exception.message"]) < MESSAGE_MAX_CHARS + 20
    assert "…(+" in ev.attributes["exception.message"]
    assert len(ev.attributes["exception.stacktrace"]) <= 2048


def test_log_lines_carrying_a_client_value_are_clipped(capsys):
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("INFO")
        logging.getLogger("t").warning("bad value %s", "z" * 50_000)
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    err = capsys.readouterr().err
    assert "…(+" in err and len(err) < MESSAGE_MAX_CHARS + 300


def test_an_aborted_status_whose_current_item_is_too_big_for_trailers_keeps_its_code_and_says_so():
    from google.protobuf import struct_pb2  # noqa: PLC0415

    from services.common.errors import Aborted  # noqa: PLC0415

    big = struct_pb2.Value(string_value="\U0001F600" * 4000)  # a 16 KB report body, say
    st = to_status(Aborted("etag is stale", current=big))
    assert st.code == grpc.StatusCode.ABORTED.value[0]
    assert len(st.SerializeToString()) * 4 / 3 < 8 * 1024
    info = error_details_pb2.ErrorInfo()
    st.details[0].Unpack(info)
    assert "details_omitted" in info.metadata
    small = to_status(Aborted("etag is stale", current=struct_pb2.Value(string_value="ok")))
    assert len(small.details) == 2  # a current item that fits still rides along
