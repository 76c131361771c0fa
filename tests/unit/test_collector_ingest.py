"""Pure ingest rules: validation, flattening, AnyValue → JSON, NUL policy, OTLP/JSON, retention plan."""
from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from datetime import UTC, date, datetime

import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from services.tracecollector.ingest import (
    NS_PER_DAY,
    ROW_FIELDS,
    Window,
    any_value,
    attributes_dict,
    first_retained_day_ns,
    flatten,
    to_json,
    without_rejected,
)
from services.tracecollector.limits import Limits, Tally, apply, over
from services.tracecollector.otlp_http import BodyTooLarge, _error, decode_body, parse_json_logs_request, parse_json_request
from services.tracecollector.writer import BatchWriter, Overloaded
from services.tracecollector.repository import Partition, partition_day, partition_name
from services.tracecollector.retention import kept_days, plan
from tests.helpers.otlp import kv

NOW = int(datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()) * 10**9
WINDOW = Window.at(NOW, retention_days=14, max_future_skew_s=3600)


def _req(*spans: trace_pb2.Span, service: str = "svc") -> trace_service_pb2.ExportTraceServiceRequest:
    r = trace_service_pb2.ExportTraceServiceRequest()
    rs = r.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = service
    rs.scope_spans.add().spans.extend(spans)
    return r


def _span(tid=b"\x01" * 16, sid=b"\x02" * 8, start=NOW - 10**9, end=NOW, **kw) -> trace_pb2.Span:
    return trace_pb2.Span(trace_id=tid, span_id=sid, start_time_unix_nano=start, end_time_unix_nano=end, **kw)


def test_window_starts_at_the_first_midnight_within_the_last_14_days():
    assert WINDOW.oldest_ns == int(datetime(2026, 11, 17, tzinfo=UTC).timestamp()) * 10**9
    assert WINDOW.newest_ns == NOW + 3600 * 10**9


@pytest.mark.parametrize("hour", [0, 1, 12, 23])
def test_F18_at_any_time_of_day_13_day_old_spans_are_kept_and_older_than_14_days_are_not(hour):
    now = int(datetime(2026, 11, 30, hour, 30, tzinfo=UTC).timestamp()) * 10**9
    oldest = first_retained_day_ns(now, 14)
    assert oldest <= now - 13 * NS_PER_DAY
    assert oldest > now - 14 * NS_PER_DAY
    assert oldest % NS_PER_DAY == 0


@pytest.mark.parametrize(("span", "reason"), [
    (_span(tid=bytes(16)), "trace_id"),
    (_span(tid=b"\x01" * 15), "trace_id"),
    (_span(sid=bytes(8)), "span_id"),
    (_span(sid=b"\x01\x02\x03"), "span_id"),
    (_span(sid=b""), "span_id"),
    (_span(parent_span_id=b"\x01" * 4), "parent_span_id"),
    (_span(start=0, end=0), "start_time_unix_nano is zero"),
    (_span(start=NOW, end=NOW - 1), "before start"),
    (_span(start=WINDOW.oldest_ns - 1, end=WINDOW.oldest_ns), "older than the retention window"),
    (_span(start=WINDOW.newest_ns, end=WINDOW.newest_ns), "future"),
])
def test_each_invalid_span_is_rejected_with_a_reason_and_the_rest_kept(span, reason):
    flat = flatten(_req(_span(sid=b"\x09" * 8), span), WINDOW)
    assert flat.rejected == 1 and len(flat.rows) == 1
    assert reason in flat.error_message
    assert "resource_spans[0].scope_spans[0].spans[1]" in flat.error_message


def test_row_shape_and_resource_fields():
    s = _span(name="op", kind=2, parent_span_id=b"\x03" * 8, trace_state="k=v")
    s.status.code = 2
    s.status.message = "bad"
    s.attributes.add(key="a").value.int_value = 7
    s.events.add(time_unix_nano=NOW, name="e")
    s.links.add(trace_id=b"\x04" * 16, span_id=b"\x05" * 8)
    (row,) = flatten(_req(s, service="chat"), WINDOW).rows
    r = dict(zip(ROW_FIELDS, row, strict=True))
    assert (r["name"], r["kind"], r["status_code"], r["status_message"]) == ("op", 2, 2, "bad")
    assert (r["service_name"], r["parent_span_id"], r["trace_state"]) == ("chat", b"\x03" * 8, "k=v")
    assert json.loads(r["attributes"]) == {"a": 7}
    assert json.loads(r["resource_attributes"]) == {"service.name": "chat"}
    assert json.loads(r["events"]) == [{"time_unix_nano": NOW, "name": "e", "attributes": {}}]
    assert json.loads(r["links"])[0]["trace_id"] == "04" * 16
    (root,) = flatten(_req(_span()), WINDOW).rows
    assert root[2] is None and root[14] is None and root[15] is None


def _any(**kw) -> common_pb2.AnyValue:
    return common_pb2.AnyValue(**kw)


def test_any_value_mapping():
    assert any_value(_any(string_value="s")) == "s"
    assert any_value(_any(bool_value=False)) is False
    assert any_value(_any(int_value=-5)) == -5
    assert any_value(_any(int_value=2**60)) == str(2**60)
    assert any_value(_any(double_value=2.5)) == 2.5
    assert any_value(_any(double_value=float("inf"))) == "Infinity"
    assert any_value(_any(bytes_value=b"\xff")) == "/w=="
    arr = _any()
    arr.array_value.values.add(int_value=1)
    arr.array_value.values.add(string_value="x")
    assert any_value(arr) == [1, "x"]
    kvl = _any()
    kvl.kvlist_value.values.add(key="k").value.bool_value = True
    assert any_value(kvl) == {"k": True}
    assert any_value(_any()) is None


def test_nul_is_stored_as_replacement_character_and_literal_backslash_u0000_text_is_kept():
    assert json.loads(to_json({"a\x00": "ok\x00bad"})) == {"a\ufffd": "ok\ufffdbad"}
    literal = "C:\\u0000 is not a NUL"
    assert json.loads(to_json({"p": literal, "q": "\\\x00"})) == {"p": literal, "q": "\\\ufffd"}
    (row,) = flatten(_req(_span(name="x\x00y")), WINDOW).rows
    assert row[5] == "x\ufffdy"


def test_without_rejected_keeps_only_valid_spans():
    req = _req(_span(), _span(tid=bytes(16)), _span(sid=b"\x07" * 8))
    out = without_rejected(req, WINDOW)
    assert [s.span_id for s in out.resource_spans[0].scope_spans[0].spans] == [b"\x02" * 8, b"\x07" * 8]
    assert len(req.resource_spans[0].scope_spans[0].spans) == 3  # the original is untouched


def test_otlp_json_hex_ids_camel_case_and_unknown_fields():
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "0102030405060708090A0B0C0D0E0F10", "spanId": "0102030405060708", "kind": 3,
        "startTimeUnixNano": "5", "endTimeUnixNano": 6, "unknownField": True,
        "links": [{"traceId": "ff" * 16, "spanId": "zz"}],
    }]}]}]}).encode()
    sp = parse_json_request(body).resource_spans[0].scope_spans[0].spans[0]
    assert sp.trace_id == bytes(range(1, 17)) and sp.span_id == bytes(range(1, 9))
    assert (sp.kind, sp.start_time_unix_nano, sp.end_time_unix_nano) == (3, 5, 6)
    assert sp.links[0].trace_id == b"\xff" * 16 and len(sp.links[0].span_id) == 1  # bad hex → rejected later
    with pytest.raises(ValueError):
        parse_json_request(b"[1]")
    with pytest.raises(ValueError):
        parse_json_request(b'{"resourceSpans": 3}')


@pytest.mark.parametrize("parse, field", [(parse_json_request, "resourceSpans"), (parse_json_logs_request, "resourceLogs")])
def test_otlp_json_of_the_wrong_shape_never_echoes_a_huge_value_whole(parse, field):
    """protobuf's ParseError quotes the value (`must be in [] which is <value>`): a 1 MiB string there
    made a 1 MiB 400 body. The message keeps its start (what was wrong, where) and names the cut."""
    huge = "A" * (1 << 20)
    with pytest.raises(ValueError) as e:
        parse(json.dumps({field: huge}).encode())
    message = str(e.value)
    assert len(message) < 1200 and "which is AAAA" in message and "chars)" in message


def test_an_otlp_http_error_answer_bounds_its_status_message():
    st = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="bad: " + "x" * 100_000)
    resp = _error(None, st, "application/x-protobuf")
    back = status_pb2.Status.FromString(resp.body)
    assert resp.status == 400 and back.message.startswith("bad: xxx") and len(back.message) < 1100


def test_retention_plan_creates_ahead_and_drops_only_whole_old_days():
    first, last = kept_days(NOW, 14, 3)
    assert (first, last) == (date(2026, 11, 17), date(2026, 12, 3))
    existing = [Partition(partition_name(d), d, False) for d in (date(2026, 11, 14), date(2026, 11, 15),
                                                                  date(2026, 11, 16), date(2026, 11, 30))]
    p = plan(existing, NOW, 14, 3)
    assert [x.day for x in p.drop] == [date(2026, 11, 14), date(2026, 11, 15), date(2026, 11, 16)]
    assert date(2026, 11, 30) not in p.create
    assert p.create[0] == date(2026, 11, 17) and p.create[-1] == date(2026, 12, 3)
    assert plan(existing + [Partition("spans_p20261201", date(2026, 12, 1), True)], NOW, 14, 3).drop[-1].detach_pending
    assert partition_day(partition_name(date(2026, 1, 2))) == date(2026, 1, 2)
    assert partition_day("spans") is None
    assert NS_PER_DAY == 86_400 * 10**9


async def test_batch_writer_group_commits_concurrent_requests_and_bounds_the_queue():
    batches: list[int] = []
    gate = asyncio.Event()

    async def copy(rows):
        await gate.wait()
        batches.append(len(rows))

    w = BatchWriter(copy, max_spans=10, batch_max_spans=100, workers=1, retry_after_s=1.5)
    w.reserve(4)
    first = asyncio.create_task(w.write([("a",)] * 4, 4))
    await asyncio.sleep(0)
    w.reserve(3)
    w.reserve(3)
    second = asyncio.create_task(w.write([("b",)] * 3, 3))
    third = asyncio.create_task(w.write([("c",)] * 3, 3))
    with pytest.raises(Overloaded) as e:
        w.reserve(1)
    assert e.value.retry_after_s == 1.5
    await asyncio.sleep(0.01)
    assert not first.done()  # not acknowledged before the COPY returned
    gate.set()
    await asyncio.gather(first, second, third)
    assert batches == [4, 6]  # the two requests that queued meanwhile went in one COPY
    assert w.queued_spans == 0
    await w.close()


async def test_batch_writer_isolates_a_failing_request():
    stored: list[str] = []

    async def copy(rows):
        if any(r[0] == "bad" for r in rows):
            raise ValueError("boom")
        stored.extend(r[0] for r in rows)

    w = BatchWriter(copy, max_spans=100, batch_max_spans=100, workers=1, retry_after_s=1)
    for _ in range(3):
        w.reserve(1)
    results = await asyncio.gather(w.write([("ok1",)], 1), w.write([("bad",)], 1), w.write([("ok2",)], 1),
                                   return_exceptions=True)
    assert results[0] is None and results[2] is None and isinstance(results[1], RuntimeError)
    assert sorted(stored) == ["ok1", "ok2"]
    await w.close()


def test_request_bodies_are_decoded_in_their_codings_and_bounded_after_decompression():
    """The OTLP/HTTP receiver decodes gzip (several members too), deflate (zlib-wrapped or raw) and a
    list of codings itself; a broken or truncated stream is ValueError (400), more than the limit
    once decoded is BodyTooLarge (413)."""
    data = b"span " * 1000
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert decode_body(gzip.compress(data[:10]) + gzip.compress(data[10:]), ["gzip"], 10_000) == data
    assert decode_body(zlib.compress(data), ["deflate"], 10_000) == data
    assert decode_body(raw.compress(data) + raw.flush(), ["deflate"], 10_000) == data
    assert decode_body(gzip.compress(zlib.compress(data)), ["deflate", "identity", "x-gzip"], 10_000) == data
    assert decode_body(b"", ["gzip"], 10) == b""
    for broken in (b"notgzip", gzip.compress(data)[:-20]):
        with pytest.raises(ValueError, match="not gzip") as e:
            decode_body(broken, ["gzip"], 10_000)
        assert not isinstance(e.value, BodyTooLarge)
    with pytest.raises(BodyTooLarge):
        decode_body(gzip.compress(data), ["gzip"], len(data) - 1)
    assert decode_body(gzip.compress(data), ["gzip"], len(data)) == data


def test_limits_cut_strings_drop_attributes_past_the_count_and_count_them_on_the_span():
    """limits.py as the SDK applies its span limits: strings (in arrays and kvlists too), bytes, keys and
    names cut, the first `count` distinct keys kept (a repeated key still keeps its last value), the
    rest dropped into dropped_attributes_count; a span within the limits is not touched."""
    lim = Limits(value_length=4, count=3, name_length=2)
    sp = trace_pb2.Span(name="long", dropped_attributes_count=1, attributes=[
        kv("a", "abcdefg"), kv("b", b"\x00" * 9), kv("a", "xyz"), kv("c", ["123456", 7]),
        kv("keylong", {"kvkeylong": "vvvvvv"}), kv("d", 1)])
    sp.events.append(trace_pb2.Span.Event(name="eventname", attributes=[kv(f"e{i}", i) for i in range(5)]))
    tally = Tally()
    assert over(sp, lim)
    apply(sp, lim, tally)
    assert sp.name == "lo"
    assert [x.key for x in sp.attributes] == ["a", "b", "a", "c"]
    assert attributes_dict(sp.attributes) == {"a": "xyz", "b": "AAAAAA==", "c": ["1234", 7]}  # 4 bytes
    assert sp.dropped_attributes_count == 1 + 2  # "keylong" and "d"
    assert sp.events[0].name == "even" and sp.events[0].dropped_attributes_count == 2
    assert (tally.truncated, tally.dropped) == (5, 4)  # name, "abcdefg", bytes, "123456", event name
    assert "4 attribute(s) dropped past 3" in tally.warning(lim)
    within = trace_pb2.Span(name="ok", attributes=[kv("a", "abcd"), kv("b", 1)])
    sent, untouched = within.SerializeToString(), Tally()
    apply(within, lim, untouched)
    assert within.SerializeToString() == sent and (untouched.truncated, untouched.dropped) == (0, 0)
    assert not over(within, Limits())
    assert Tally().warning(lim) == ""


@pytest.mark.parametrize("clickhouse", [False, True])
def test_limits_cut_the_status_message_trace_states_and_scope_on_either_row(clickhouse):
    """The status message, the span's and its links' trace states (value length) and the scope's name
    and version (name length) were stored whole; now cut in the request (the forwarded copy) and the
    rows of both stores."""
    from services.tracecollector.clickhouse_rows import COLUMNS, ExporterRowEncoder  # noqa: PLC0415

    lim = Limits(value_length=4, count=3, name_length=2)
    now = 10**18
    sp = trace_pb2.Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="ok", start_time_unix_nano=now,
                        end_time_unix_nano=now + 1, trace_state="k=vvvvvv",
                        status=trace_pb2.Status(code=2, message="broken"))
    sp.links.append(trace_pb2.Span.Link(trace_id=b"\x03" * 16, span_id=b"\x04" * 8, trace_state="l=wwwwww"))
    req = trace_service_pb2.ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    ss.scope.name, ss.scope.version = "scope", "1.2.3"
    ss.spans.append(sp)
    out = flatten(req, Window(0, 2 * now), ExporterRowEncoder() if clickhouse else None, lim)
    (row,) = out.rows
    got = req.resource_spans[0].scope_spans[0]
    assert (got.scope.name, got.scope.version) == ("sc", "1.")
    assert (got.spans[0].status.message, got.spans[0].trace_state, got.spans[0].links[0].trace_state) == (
        "brok", "k=vv", "l=ww")
    assert out.tally.truncated == 5
    if clickhouse:
        col = COLUMNS.index
        assert (row[col("ScopeName")], row[col("StatusMessage")], row[col("TraceState")]) == ("sc", "brok", "k=vv")
        assert row[col("Links.TraceState")] == ["l=ww"]
    else:
        assert (row[10], row[8], row[11]) == ("sc", "brok", "k=vv")
        assert json.loads(row[15])[0]["trace_state"] == "l=ww"


@pytest.mark.parametrize("clickhouse", [False, True])
def test_a_resource_keeps_service_name_then_its_first_attributes_within_the_byte_limit_on_either_row(clickhouse):
    """limits.limit_resource_bytes: service.name (wherever sent) and then the attributes in the order
    sent while they fit; the first that does not and every later one dropped, counted (distinct keys) on
    the resource beside the sender's count and in each row of both stores; a resource within the limit is
    not touched."""
    from services.tracecollector.clickhouse_rows import COLUMNS, ExporterRowEncoder  # noqa: PLC0415

    lim = Limits(resource_bytes=100)
    req = _req(_span())
    res = req.resource_spans[0].resource
    del res.attributes[:]
    res.attributes.extend([kv("a", "x" * 40), kv("b", "y" * 40), kv("c", 1), kv("b", "z"), kv("service.name", "svc")])
    res.dropped_attributes_count = 3
    within = _req(_span(sid=b"\x03" * 8), service="other")
    sent = within.SerializeToString()
    req.resource_spans.extend(within.resource_spans)
    out = flatten(req, WINDOW, ExporterRowEncoder() if clickhouse else None, lim)
    assert [x.key for x in res.attributes] == ["a", "service.name"]  # "b" (44 bytes) does not fit: "c" not kept
    assert res.dropped_attributes_count == 3 + 2 and out.tally.resource_dropped == 2  # "b" twice, "c"
    assert "2 resource attribute(s) dropped past 100 bytes" in out.tally.warning(lim)
    assert req.resource_spans[1].SerializeToString() == within.resource_spans[0].SerializeToString()
    assert within.SerializeToString() == sent
    cut, whole = out.rows
    if clickhouse:
        col = COLUMNS.index
        assert cut[col("ResourceAttributes")] == {"a": "x" * 40, "service.name": "svc"}
        assert json.loads(cut[col("AgentFeedbackTypes")])["d"] == {"r": 5}
        assert whole[col("AgentFeedbackTypes")] == ""
    else:
        r, w = dict(zip(ROW_FIELDS, cut, strict=True)), dict(zip(ROW_FIELDS, whole, strict=True))
        assert json.loads(r["resource_attributes"]) == {"a": "x" * 40, "service.name": "svc"}
        assert (r["resource_dropped_attributes_count"], w["resource_dropped_attributes_count"]) == (5, 0)
