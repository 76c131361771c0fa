"""SearchTraces answers exactly what a full scan would, whatever the walk (issue 17: the search walks
matching spans newest first in growing windows and stops early; these cases make it stop late)."""
from __future__ import annotations

import random
import time

import pytest
from agentfeedback.traces.v1 import traces_pb2

from tests.conftest import SPAN_STORES
from tests.helpers.otlp import NS, new_span_id, new_trace_id, request, span, ts

pytestmark = pytest.mark.parametrize("span_store", SPAN_STORES, indirect=True)



async def _all_pages(collector, **kw) -> list[str]:
    out, token = [], ""
    while True:
        page = await collector.query().SearchTraces(
            traces_pb2.SearchTracesRequest(page_size=50, page_token=token, **kw), metadata=collector.md())
        out += [t.trace_id for t in page.traces]
        token = page.next_page_token
        if not token:
            return out


async def test_search_orders_by_the_earliest_matching_span_even_when_a_trace_spans_hours(collector):
    """400 traces over 10 hours; each has a late span and an early one up to 8 hours before it, so the
    newest spans belong to traces that sort far down. Every page set equals the brute-force answer."""
    now = time.time_ns()
    rnd = random.Random(17)
    stored: list[tuple[bytes, int, dict]] = []  # (trace id, span start, attributes)
    batch = []
    for i in range(400):
        tid = new_trace_id()
        late = now - rnd.randrange(1, 10 * 3600) * NS
        early = late - rnd.randrange(0, 8 * 3600) * NS
        kind = ("search", "read")[i % 2]
        for start, attrs in ((late, {"tool": kind, "n": i % 7}), (early, {"tool": kind, "flag": i % 3 == 0})):
            batch.append(span(tid, new_span_id(), start_ns=start, attrs=attrs))
            stored.append((tid, start, {"tool": kind, **({"n": str(i % 7)} if "n" in attrs else
                                                          {"flag": str(i % 3 == 0).lower()})}))
        if len(batch) >= 200:
            await collector.otlp().Export(request(batch))
            batch = []
    lo, hi = now - 12 * 3600 * NS, now

    def expected(attrs: dict[str, str], start: int = lo, end: int = hi) -> list[str]:
        first: dict[bytes, int] = {}
        for tid, s, a in stored:
            if start <= s < end and all(a.get(k) == v for k, v in attrs.items()):
                first[tid] = min(first.get(tid, s), s)
        return [t.hex() for t, _ in sorted(first.items(), key=lambda x: (x[1], x[0]), reverse=True)]

    for attrs in ({}, {"tool": "search"}, {"n": "3"}, {"flag": "true"}, {"tool": "read", "n": "4"}):
        want = expected(attrs)
        assert want, attrs
        assert await _all_pages(collector, start_time=ts(lo), end_time=ts(hi), attributes=attrs) == want, attrs
    # A window that cuts traces in two: only the spans inside it count.
    mid_lo, mid_hi = now - 6 * 3600 * NS, now - 2 * 3600 * NS
    assert await _all_pages(collector, start_time=ts(mid_lo), end_time=ts(mid_hi),
                            attributes={"tool": "search"}) == expected({"tool": "search"}, mid_lo, mid_hi)
    # "3" matches the number 3 and the string "3", never "3.5" or 33.
    tid = new_trace_id()
    await collector.otlp().Export(request([
        span(tid, new_span_id(), start_ns=now - 5 * NS, attrs={"n": "3"}),
        span(new_trace_id(), new_span_id(), start_ns=now - 4 * NS, attrs={"n": 3.5}),
        span(new_trace_id(), new_span_id(), start_ns=now - 3 * NS, attrs={"n": 33}),
    ]))
    got = await _all_pages(collector, start_time=ts(now - 10 * NS), end_time=ts(now), attributes={"n": "3"})
    assert got == [tid.hex()]


async def test_an_empty_value_filter_matches_only_spans_that_have_the_key_set_to_it(collector):
    now = time.time_ns()
    with_empty, without = new_trace_id(), new_trace_id()
    await collector.otlp().Export(request([
        span(with_empty, new_span_id(), start_ns=now - 3 * NS, attrs={"k": "", "other": "x"}),
        span(without, new_span_id(), start_ns=now - 2 * NS, attrs={"other": ""}),
    ]))
    assert await _all_pages(collector, start_time=ts(now - 10 * NS), end_time=ts(now), attributes={"k": ""}) == [
        with_empty.hex()]
