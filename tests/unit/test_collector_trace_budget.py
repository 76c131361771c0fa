"""GetTrace's answer budget (services/tracecollector/trace_budget.py), pure: the cheap size test, the
water level, the marker, and what `fit` cuts first."""
from __future__ import annotations

import json

from agentfeedback.traces.v1 import traces_pb2

from services.common.clip import MARKER
from services.tracecollector.trace_budget import MIN_CUT_BYTES, clipped, fit, may_exceed, water_level


def _row(attributes: dict, **kw) -> dict:
    """A stored span as PostgreSQL hands it over (JSON as text)."""
    return {"name": "op", "status_message": "", "service_name": "svc", "scope_name": "s",
            "attributes": json.dumps(attributes), "resource_attributes": '{"service.name": "svc"}',
            "events": None, "links": None, **kw}


class _Record:
    """A ClickHouse SpanRecord's shape: decoded values, and the length of the JSON they came from."""

    def __init__(self, stored_chars: int):
        self.stored_chars = stored_chars
        self._d = {"name": "op", "status_message": "", "service_name": "svc", "scope_name": "s", "attributes": {}}

    def __getitem__(self, key):
        return self._d[key]


def test_may_exceed_is_false_for_an_ordinary_trace_and_true_when_the_stored_text_could_pass_the_budget():
    ordinary = [_row({f"a{i}": "v" * 50 for i in range(20)})] * 50  # 50 spans of ~1.3 KiB
    assert not may_exceed(ordinary, 3 * 1024 * 1024)
    assert may_exceed([_row({"big": "x" * 600_000})], 3 * 1024 * 1024)
    assert may_exceed([_row({}, events="e" * 600_000)], 3 * 1024 * 1024)
    assert not may_exceed([_Record(1000)] * 10, 3 * 1024 * 1024)
    assert may_exceed([_Record(600_000)], 3 * 1024 * 1024)


def test_water_level_cuts_the_largest_first_to_one_cap():
    assert water_level([100, 50, 10], 60, 0) == 45  # 100 → 45 and 50 → 45 save 60; 10 untouched
    assert water_level([100, 50, 10], 10, 0) == 90
    assert water_level([100, 50, 10], 160, 0) == 0
    assert water_level([100, 50, 10], 100, 40) is None  # cutting all to 40 saves only 70


def test_clipped_keeps_a_prefix_on_a_character_boundary_and_names_what_it_cut():
    text = "é" * 1000
    out = clipped(text, 100)
    assert len(out.encode()) <= 100 and out.endswith(MARKER.format(1000 - out.index("…")))
    head = out[: out.index("…")]
    assert set(head) == {"é"} and len(head) == (100 - len(MARKER.format(1000).encode())) // 2


def _span(i: int, values: dict) -> traces_pb2.Span:
    sp = traces_pb2.Span(trace_id="ab" * 16, span_id=f"{i:016x}", name=f"s{i}", start_time_unix_nano=i)
    sp.attributes.update(values)
    return sp


def test_fit_leaves_a_trace_within_the_budget_untouched():
    trace = traces_pb2.Trace(trace_id="ab" * 16, spans=[_span(1, {"a": "x" * 1000})])
    sent = trace.SerializeToString()
    assert fit(trace, 10_000) == 0 and trace.SerializeToString() == sent


def test_fit_cuts_the_largest_values_first_and_names_only_when_values_are_not_enough():
    trace = traces_pb2.Trace(trace_id="ab" * 16, spans=[
        _span(1, {"big": "b" * 20_000, "mid": "m" * 5_000, "small": "s" * 500, "n": 3}),
        _span(2, {"list": ["l" * 9_000, 1]}),
    ])
    assert fit(trace, 12_000) == 3 and trace.ByteSize() <= 12_000
    a, b = trace.spans[0].attributes, trace.spans[1].attributes
    assert a["small"] == "s" * 500 and a["n"] == 3
    assert a["big"].startswith("bbb") and a["big"].endswith(" chars)") and a["mid"].endswith(" chars)")
    assert b["list"].startswith('["lll') and b["list"].endswith(" chars)")
    assert abs(len(a["big"]) - len(a["mid"])) < 16  # one level
    names = traces_pb2.Trace(trace_id="ab" * 16, spans=[_span(1, {"v": "x" * 2000})])
    names.spans[0].events.add(name="e" * 20_000)
    names.spans[0].status_message = "why " * 5000
    assert fit(names, 4_000) == 3 and names.ByteSize() <= 4_000
    sp = names.spans[0]
    assert len(sp.attributes["v"].encode()) <= MIN_CUT_BYTES  # values first, down to their floor
    assert sp.events[0].name.startswith("eee") and sp.status_message.startswith("why why")
    assert (sp.span_id, sp.name) == (f"{1:016x}", "s1")
