"""Attribute limits (services/tracecollector/limits.py): a span over them is stored cut to them, never
rejected; the Export says what was cut (partial_success with 0 rejected) and GetTrace returns the cut
values. Before, one attribute could hold the whole 4 MiB message."""
from __future__ import annotations

import random

import pytest
from opentelemetry.proto.trace.v1 import trace_pb2

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
