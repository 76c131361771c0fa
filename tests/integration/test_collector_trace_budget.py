"""GetTrace's answer budget (services/tracecollector/trace_budget.py) on each span store, read through a
real gRPC client with gRPC's default limits (4 MiB received): every span is kept, the largest attribute
values are cut with the clip marker, the answer says how many. Before, a trace of three spans holding
~2 MiB each (within the ingest limits) failed RESOURCE_EXHAUSTED at every client."""
from __future__ import annotations

import os
import re
import time

import pytest
from agentfeedback.traces.v1 import traces_pb2
from google.protobuf import json_format
from opentelemetry.proto.trace.v1 import trace_pb2

from services.tracecollector.trace_budget import GET_TRACE_BUDGET_BYTES, MIN_CUT_BYTES
from tests.conftest import SPAN_STORES
from tests.helpers.otlp import NS, kv, new_span_id, new_trace_id, request, span

pytestmark = pytest.mark.parametrize("span_store", SPAN_STORES, indirect=True)

VALUE_LIMIT = 16 * 1024  # the attribute value length limit (settings.py default)
MARKER = re.compile(r"…\(\+(\d+) chars\)$")  # services.common.clip.MARKER


def _big(n: int = VALUE_LIMIT) -> str:
    return os.urandom(n // 2).hex()  # incompressible text, n characters


def _structure(sp: traces_pb2.Span) -> tuple:
    return (sp.trace_id, sp.span_id, sp.parent_span_id, sp.name, sp.kind, sp.start_time_unix_nano,
            sp.end_time_unix_nano, sp.status_code, sp.status_message, sp.service_name, sp.scope_name,
            [(e.name, e.time_unix_nano) for e in sp.events], [(ln.trace_id, ln.span_id) for ln in sp.links])


async def test_a_trace_over_4_mib_reads_back_whole_in_its_spans_with_its_largest_values_cut_and_counted(collector):
    """Three spans of 120 attributes × 16 KiB (5.6 MiB stored, each span its own ~2 MiB Export, within the
    ingest limits): GetTrace through a client with the default 4 MiB limit answers (before:
    RESOURCE_EXHAUSTED), holds the three spans with their structure, is within the 3 MiB budget, and
    every value it cut ends with the clip marker naming the characters cut; the count says how many."""
    tid, root = new_trace_id(), new_span_id()
    start = time.time_ns() - 30 * NS
    sent = []
    for i in range(3):
        sp = span(tid, root if i == 0 else new_span_id(), parent=b"" if i == 0 else root, name=f"step-{i}",
                  start_ns=start + i * 1_000_000, attrs={"small": f"kept-{i}", "n": i,
                                                         **{f"big{j:03}": _big() for j in range(120)}})
        sp.status.code = trace_pb2.Status.STATUS_CODE_ERROR if i == 2 else trace_pb2.Status.STATUS_CODE_OK
        sent.append(sp)
        resp = await collector.otlp().Export(request([sp], service="agent"))
        assert not resp.HasField("partial_success")  # stored as sent: within every ingest limit

    trace = await collector.get_trace(tid)  # a default channel: 4 MiB received at most

    assert trace.ByteSize() <= GET_TRACE_BUDGET_BYTES
    assert [s.name for s in trace.spans] == ["step-0", "step-1", "step-2"]
    assert [s.span_id for s in trace.spans] == [s.span_id.hex() for s in sent]
    assert [s.parent_span_id for s in trace.spans] == ["", root.hex(), root.hex()]
    assert [s.status_code for s in trace.spans] == [1, 1, 2]
    assert [s.start_time_unix_nano for s in trace.spans] == [s.start_time_unix_nano for s in sent]
    cut = 0
    for got, sp in zip(trace.spans, sent, strict=True):
        assert (got.attributes["small"], got.attributes["n"]) == (sp.attributes[0].value.string_value, sp.attributes[1].value.int_value)
        assert len(got.attributes) == 122 and got.resource_attributes["service.name"] == "agent"
        whole = {kv.key: kv.value.string_value for kv in sp.attributes}
        for k, v in got.attributes.items():
            if (m := MARKER.search(str(v))) is not None:
                cut += 1
                head = v[:m.start()]
                assert whole[k].startswith(head) and len(head) + int(m.group(1)) == len(whole[k])
                assert len(head) > VALUE_LIMIT // 4  # cut only as far as the budget needs (~7 KiB kept)
    assert cut == trace.truncated_value_count == 360  # every big value, none of the small ones


async def test_a_small_trace_is_answered_as_stored_and_says_nothing_was_cut(collector):
    tid, root = new_trace_id(), new_span_id()
    spans = [span(tid, root, name="root", attrs={"s": "x" * 2000, "arr": ["a", 1], "kv": {"k": "v"}}),
             span(tid, new_span_id(), parent=root, name="child", attrs={"i": 7})]
    spans[0].events.append(trace_pb2.Span.Event(time_unix_nano=spans[0].start_time_unix_nano, name="chat.in",
                                                attributes=[kv("m", "y" * 500)]))
    await collector.otlp().Export(request(spans))
    trace = await collector.get_trace(tid)
    assert trace.truncated_value_count == 0
    got = {s.name: s for s in trace.spans}
    assert got["root"].attributes["s"] == "x" * 2000 and got["root"].events[0].attributes["m"] == "y" * 500
    assert json_format.MessageToDict(got["root"].attributes) == {"s": "x" * 2000, "arr": ["a", 1], "kv": {"k": "v"}}
    assert got["child"].attributes["i"] == 7


async def test_a_smaller_budget_cuts_the_largest_values_first_wherever_they_are(start_collector):
    """With a 128 KiB budget (the setting): span, event, link and resource values over the level are cut
    (a list value becomes its JSON text, cut); values under it, numbers and every span stay."""
    budget = 128 * 1024
    collector = await start_collector(get_trace_budget_bytes=budget)
    tid, root = new_trace_id(), new_span_id()
    spans = []
    for i in range(4):
        sp = span(tid, root if i == 0 else new_span_id(), parent=b"" if i == 0 else root, name=f"s{i}",
                  attrs={"short": "s" * 100, "num": 1.5, "list": [_big(8000), "b"], "big": _big()})
        sp.events.append(trace_pb2.Span.Event(time_unix_nano=sp.start_time_unix_nano, name="ev",
                                              attributes=[kv("payload", _big())]))
        sp.links.append(trace_pb2.Span.Link(trace_id=new_trace_id(), span_id=new_span_id(),
                                            attributes=[kv("why", _big())]))
        spans.append(sp)
    req = request(spans)
    req.resource_spans[0].resource.attributes.extend([kv("host.description", _big())])
    await collector.otlp().Export(req)

    trace = await collector.get_trace(tid)
    assert trace.ByteSize() <= budget and len(trace.spans) == 4
    for sp in trace.spans:
        assert sp.attributes["short"] == "s" * 100 and sp.attributes["num"] == 1.5
        assert sp.resource_attributes["service.name"] == "svc-test"
        assert isinstance(sp.attributes["list"], str) and MARKER.search(sp.attributes["list"])
        assert sp.attributes["list"].startswith('["')
        for v in (sp.attributes["big"], sp.events[0].attributes["payload"], sp.links[0].attributes["why"],
                  sp.resource_attributes["host.description"]):
            assert MARKER.search(v) and len(v.encode()) <= 16 * 1024
            assert len(v.encode()) >= MIN_CUT_BYTES // 2
        assert sp.events[0].name == "ev" and len(sp.links) == 1
    assert trace.truncated_value_count == 4 * 5
