"""Attribute limits (services/tracecollector/limits.py): a span over them is stored cut to them, never
rejected; the Export says what was cut (partial_success with 0 rejected) and GetTrace returns the cut
values. Before, one attribute could hold the whole 4 MiB message."""
from __future__ import annotations

import os
import random

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from services.tracecollector.query import span_proto
from tests.conftest import SPAN_STORES
from tests.helpers.otlp import kv, new_span_id, new_trace_id, request, span

pytestmark = pytest.mark.parametrize("span_store", SPAN_STORES, indirect=True)

VALUE_LIMIT = 16 * 1024  # the defaults (settings.py)
COUNT_LIMIT = 128
NAME_LIMIT = 512


async def test_an_oversized_attribute_is_truncated_and_counted_not_rejected_and_get_trace_returns_it_cut(collector):
    big = "é" + "x" * (600 * 1024)
    tid, sid = new_trace_id(), new_span_id()
    attrs = {"big": big, "arr": [big, "short"], "small": "ok", **{f"a{i:03}": i for i in range(140)}}
    sp = span(tid, sid, name="n" * 5000, attrs=attrs)
    sp.events.append(trace_pb2.Span.Event(time_unix_nano=sp.start_time_unix_nano, name="ev",
                                          attributes=[kv("big", big)]))
    service = "".join(chr(random.randrange(0x4E00, 0x9FFF)) for _ in range(3000))  # 9000 bytes, incompressible
    plain = span(tid, new_span_id(), name="plain", attrs={"big": big})  # no events: the store's own test
    resp = await collector.otlp().Export(request([sp, plain], service=service))
    assert resp.partial_success.rejected_spans == 0
    warning = resp.partial_success.error_message
    assert "truncated" in warning and "15 attribute(s) dropped" in warning, warning  # 143 attributes, 128 kept

    got, got_plain = sorted((await collector.get_trace(tid)).spans, key=lambda s: s.name != "n" * NAME_LIMIT)
    assert got_plain.attributes["big"] == big[:VALUE_LIMIT]
    assert got.attributes["big"] == big[:VALUE_LIMIT]
    assert list(got.attributes["arr"]) == [big[:VALUE_LIMIT], "short"]
    assert got.attributes["small"] == "ok"
    assert len(got.attributes) == COUNT_LIMIT
    assert "a124" in got.attributes and "a125" not in got.attributes  # the first 128 keys, in order
    assert got.name == "n" * NAME_LIMIT
    assert got.events[0].attributes["big"] == big[:VALUE_LIMIT]
    assert got.service_name == service[:NAME_LIMIT]
    assert got.resource_attributes["service.name"] == service  # 3000 characters: within the value length


async def test_spans_within_the_limits_are_stored_as_sent_and_the_export_says_nothing(collector):
    tid, sid = new_trace_id(), new_span_id()
    value = "v" * VALUE_LIMIT
    attrs = {f"k{i}": value if i == 0 else i for i in range(COUNT_LIMIT)}
    resp = await collector.otlp().Export(request([span(tid, sid, name="m" * NAME_LIMIT, attrs=attrs)]))
    assert not resp.HasField("partial_success")
    (got,) = (await collector.get_trace(tid)).spans
    assert got.attributes["k0"] == value and len(got.attributes) == COUNT_LIMIT and got.name == "m" * NAME_LIMIT


EVENT_LIMIT = LINK_LIMIT = 128  # OpenTelemetry SpanLimits EventCountLimit / LinkCountLimit defaults


async def test_dropped_counts_are_stored_and_events_and_links_past_their_limits_dropped_and_counted(collector):
    """The sender's dropped counts plus what our limits drop are stored and returned by GetTrace (before:
    forwarded only, GetTrace said 0); a span's events and links past 128 each are dropped and counted,
    the first ones kept in order; the Export says so (0 rejected)."""
    tid, sid = new_trace_id(), new_span_id()
    sp = span(tid, sid, name="busy", attrs={f"a{i:03}": i for i in range(COUNT_LIMIT + 12)})
    sp.dropped_attributes_count, sp.dropped_events_count, sp.dropped_links_count = 3, 2, 1
    t0 = sp.start_time_unix_nano
    for i in range(EVENT_LIMIT + 5):
        attrs = [kv(f"k{j:03}", j) for j in range(COUNT_LIMIT + 2)] if i == 0 else [kv("i", i)]
        sp.events.append(trace_pb2.Span.Event(time_unix_nano=t0 + i, name=f"e{i:03}", attributes=attrs,
                                              dropped_attributes_count=4 if i == 0 else 0))
    for i in range(LINK_LIMIT + 7):
        sp.links.append(trace_pb2.Span.Link(trace_id=new_trace_id(), span_id=new_span_id(),
                                            attributes=[kv("i", i)], dropped_attributes_count=5 if i == 1 else 0))
    plain = span(tid, new_span_id(), name="plain", attrs={"x": 1})
    resp = await collector.otlp().Export(request([sp, plain]))
    assert resp.partial_success.rejected_spans == 0
    warning = resp.partial_success.error_message
    assert "5 event(s) dropped past 128" in warning and "7 link(s) dropped past 128" in warning, warning
    assert "14 attribute(s) dropped" in warning, warning  # 12 of the span's, 2 of its first event's

    got, got_plain = sorted((await collector.get_trace(tid)).spans, key=lambda s: s.name != "busy")
    assert (got.dropped_attributes_count, got.dropped_events_count, got.dropped_links_count) == (3 + 12, 2 + 5, 1 + 7)
    assert [e.name for e in got.events] == [f"e{i:03}" for i in range(EVENT_LIMIT)]  # the first 128, in order
    assert len(got.links) == LINK_LIMIT and got.links[-1].attributes["i"] == LINK_LIMIT - 1
    assert got.events[0].dropped_attributes_count == 4 + 2 and len(got.events[0].attributes) == COUNT_LIMIT
    assert [e.dropped_attributes_count for e in got.events[1:]] == [0] * (EVENT_LIMIT - 1)
    assert [ln.dropped_attributes_count for ln in got.links[:3]] == [0, 5, 0]
    assert (got_plain.dropped_attributes_count, got_plain.dropped_events_count, got_plain.dropped_links_count) == (0, 0, 0)


async def test_a_senders_dropped_counts_on_a_span_within_the_limits_are_stored(collector):
    """The fast path (no limit reached) stores the sender's counts too."""
    tid, sid = new_trace_id(), new_span_id()
    sp = span(tid, sid, name="s", attrs={"x": "y"})
    sp.dropped_attributes_count, sp.dropped_events_count, sp.dropped_links_count = 7, 8, 9
    sp.events.append(trace_pb2.Span.Event(time_unix_nano=sp.start_time_unix_nano, name="e", dropped_attributes_count=2))
    sp.links.append(trace_pb2.Span.Link(trace_id=new_trace_id(), span_id=new_span_id(), dropped_attributes_count=3))
    resp = await collector.otlp().Export(request([sp]))
    assert not resp.HasField("partial_success")
    (got,) = (await collector.get_trace(tid)).spans
    assert (got.dropped_attributes_count, got.dropped_events_count, got.dropped_links_count) == (7, 8, 9)
    assert got.events[0].dropped_attributes_count == 2 and got.links[0].dropped_attributes_count == 3


async def test_the_status_message_and_the_scope_name_are_cut_too(collector):
    """A span's status message (value length) and its scope's name (name length) were stored whole: the
    scope name once per span of its scope, so a 1 MiB scope name on 200 spans wrote 200 MiB, and the
    trace could no longer be read (GetTrace over gRPC's 4 MiB)."""
    big = "é" + "s" * (600 * 1024)
    tid = new_trace_id()
    sp = span(tid, new_span_id(), name="cut")
    sp.status.code, sp.status.message = trace_pb2.Status.STATUS_CODE_ERROR, big
    req = request([sp, span(tid, new_span_id(), name="plain")])
    req.resource_spans[0].scope_spans[0].scope.name = big
    resp = await collector.otlp().Export(req)
    assert resp.partial_success.rejected_spans == 0
    assert "truncated" in resp.partial_success.error_message, resp.partial_success
    got = {s.name: s for s in (await collector.get_trace(tid)).spans}
    assert got["cut"].status_message == big[:VALUE_LIMIT]
    assert got["cut"].scope_name == got["plain"].scope_name == big[:NAME_LIMIT]


RESOURCE_BYTE_LIMIT = 64 * 1024  # the default (settings.py)


async def test_a_resource_keeps_at_most_64_kib_of_attributes_the_first_ones_and_the_export_says_so(collector):
    """A resource is stored with every span, and the specification exempts it from the attribute count
    limit: 64 random 16 KiB attributes on 200 tiny spans (a 1.06 MB Export) grew the database by
    207 MB. Now each span's stored resource keeps service.name and then the first attributes while they
    fit in 64 KiB (three of 16 KiB), the other 61 are dropped and counted (plus the sender's 2) in
    resource_dropped_attributes_count, and the Export says so (0 rejected)."""
    tid = new_trace_id()
    values = [os.urandom(8 * 1024).hex() for _ in range(64)]  # 16 KiB each, incompressible
    req = request([span(tid, new_span_id(), name=f"s{i}") for i in range(200)], service="svc")
    resource = req.resource_spans[0].resource
    resource.attributes.extend(kv(f"host.r{i:02}", v) for i, v in enumerate(values))
    resource.dropped_attributes_count = 2  # the sender's own
    assert 1_000_000 < req.ByteSize() < 1_100_000

    resp = await collector.otlp().Export(req)
    assert resp.partial_success.rejected_spans == 0
    assert "61 resource attribute(s) dropped past 65536 bytes" in resp.partial_success.error_message, resp.partial_success

    rows = await collector.server.repo.get_trace(tid)  # what is stored (GetTrace's answer budget would cut it)
    assert len(rows) == 200
    for got in map(span_proto, rows):
        stored = dict(got.resource_attributes.items())
        assert stored == {"service.name": "svc", "host.r00": values[0], "host.r01": values[1], "host.r02": values[2]}
        assert sum(len(k.encode()) + len(v.encode()) for k, v in stored.items()) <= RESOURCE_BYTE_LIMIT
        assert got.resource_dropped_attributes_count == 61 + 2 and got.service_name == "svc"
    answer = await collector.get_trace(tid)
    assert len(answer.spans) == 200 and {s.resource_dropped_attributes_count for s in answer.spans} == {63}


async def test_resource_attributes_within_the_byte_limit_are_stored_whole_and_service_name_always_kept(start_collector):
    """Under a 15,000-byte limit (the setting), service.name sent last is still kept; a resource within
    the limit is stored as sent with its sender's count."""
    collector = await start_collector(resource_attributes_byte_limit=15_000)
    tid = new_trace_id()
    req = request([span(tid, new_span_id(), name="cut")])
    resource = req.resource_spans[0].resource
    del resource.attributes[:]
    resource.attributes.extend([kv("a", "x" * 9000), kv("b", "y" * 9000), kv("c", "z" * 9000), kv("service.name", "late")])
    small = request([span(tid, new_span_id(), name="whole")], service="small")
    small.resource_spans[0].resource.attributes.append(kv("host.name", "h" * 9000))
    small.resource_spans[0].resource.dropped_attributes_count = 1
    resp = await collector.otlp().Export(trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[*req.resource_spans, *small.resource_spans]))
    assert "2 resource attribute(s) dropped past 15000 bytes" in resp.partial_success.error_message, resp.partial_success
    got = {s.name: s for s in map(span_proto, await collector.server.repo.get_trace(tid))}
    assert dict(got["cut"].resource_attributes.items()) == {"a": "x" * 9000, "service.name": "late"}
    assert got["cut"].resource_dropped_attributes_count == 2 and got["cut"].service_name == "late"
    assert dict(got["whole"].resource_attributes.items()) == {"service.name": "small", "host.name": "h" * 9000}
    assert got["whole"].resource_dropped_attributes_count == 1
