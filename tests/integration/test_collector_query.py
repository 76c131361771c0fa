"""TraceQueryService and retention against a real collector, on each span store (PostgreSQL, and
ClickHouse through chdb, the in-process engine standing in for a server)."""
from __future__ import annotations

import datetime as dt
import time

import asyncpg
import grpc
import pytest
from agentfeedback.traces.v1 import traces_pb2
from google.protobuf import timestamp_pb2

from services.common.errors import error_info
from tests.conftest import SPAN_STORES
from tests.helpers.otlp import NS, kv, new_span_id, new_trace_id, one_trace, request, span, ts

pytestmark = pytest.mark.parametrize("span_store", SPAN_STORES, indirect=True)


DAY = 86_400 * NS


async def test_get_trace_returns_parents_events_links_typed_attributes_and_resource(collector):
    tid = new_trace_id()
    root_id, child_id = new_span_id(), new_span_id()
    start = time.time_ns() - 10 * NS
    root = span(tid, root_id, name="chat.turn", start_ns=start, duration_ns=50_000_000, attrs={
        "s": "text", "i": 42, "big": 2**60, "d": 1.5, "nan": float("nan"), "b": True, "bytes": b"\x00\x01",
        "arr": ["a", 1], "kv": {"inner": "x"},
    })
    root.status.code = 2
    root.status.message = "agent failed"
    root.events.add(name="chat.in", time_unix_nano=start + 1, attributes=[kv("message.id", "m1")])
    child = span(tid, child_id, parent=root_id, name="tool.call", start_ns=start + 1000, kind=3)
    child.links.add(trace_id=b"\x11" * 16, span_id=b"\x22" * 8, attributes=[kv("why", "caller")])
    await collector.otlp().Export(request([child, root], service="chat"))

    trace = await collector.get_trace(tid)
    assert trace.trace_id == tid.hex()
    r, c = trace.spans  # ordered by start time
    assert (r.name, r.parent_span_id, r.span_id) == ("chat.turn", "", root_id.hex())
    assert (r.start_time_unix_nano, r.end_time_unix_nano) == (start, start + 50_000_000)
    assert (r.status_code, r.status_message) == (traces_pb2.STATUS_CODE_ERROR, "agent failed")
    a = r.attributes
    assert (a["s"], a["i"], a["big"], a["d"], a["nan"], a["b"]) == ("text", 42, str(2**60), 1.5, "NaN", True)
    assert a["bytes"] == "AAE="
    assert list(a["arr"]) == ["a", 1] and a["kv"]["inner"] == "x"
    assert r.events[0].name == "chat.in" and r.events[0].attributes["message.id"] == "m1"
    assert r.resource_attributes["service.name"] == "chat" and r.service_name == "chat"
    assert (c.parent_span_id, c.kind, c.scope_name) == (root_id.hex(), traces_pb2.SPAN_KIND_CLIENT, "tests")
    assert (c.links[0].trace_id, c.links[0].span_id) == ("11" * 16, "22" * 8)
    assert c.links[0].attributes["why"] == "caller"


async def test_nul_is_stored_as_the_replacement_character_and_doubles_match_their_string(collector):
    """ingest's text policy on either store: every U+0000 (name, status, attribute keys and values, inside
    arrays and kvlists, events, links, resource) reads back U+FFFD; a double attribute is found by its
    string form."""
    tid, sid = new_trace_id(), new_span_id()
    start = time.time_ns() - 10 * NS
    sp = span(tid, sid, name="n\x00ame", start_ns=start, attrs={
        "k\x00": "v\x00", "arr": ["a\x00", 1], "kv": {"in\x00": "x\x00"}, "d": 0.25, "whole": 100.0})
    sp.status.code, sp.status.message = 2, "bad\x00"
    sp.events.add(name="e\x00", time_unix_nano=start + 1, attributes=[kv("m", "\x00")])
    sp.links.add(trace_id=b"\x11" * 16, span_id=b"\x22" * 8, trace_state="t\x00", attributes=[kv("w", ["\x00"])])
    req = request([sp], service="chat")
    req.resource_spans[0].resource.attributes.append(kv("host.name", "h\x00"))
    await collector.otlp().Export(req)

    (r,) = (await collector.get_trace(tid)).spans
    f = "\ufffd"
    assert (r.name, r.status_message) == (f"n{f}ame", f"bad{f}")
    assert r.attributes[f"k{f}"] == f"v{f}" and list(r.attributes["arr"]) == [f"a{f}", 1]
    assert dict(r.attributes["kv"]) == {f"in{f}": f"x{f}"} and (r.attributes["d"], r.attributes["whole"]) == (0.25, 100)
    assert (r.events[0].name, r.events[0].attributes["m"]) == (f"e{f}", f)
    assert list(r.links[0].attributes["w"]) == [f] and r.resource_attributes["host.name"] == f"h{f}"
    for attrs in ({f"k{f}": f"v{f}"}, {"d": "0.25"}):
        page = await collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
            start_time=ts(start - NS), end_time=ts(start + NS), attributes=attrs), metadata=collector.md())
        assert [t.trace_id for t in page.traces] == [tid.hex()], attrs


async def test_get_trace_errors_invalid_argument_and_not_found(collector):
    q = collector.query()
    for bad in ("xyz", "0" * 32, "ab" * 15):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await q.GetTrace(traces_pb2.GetTraceRequest(trace_id=bad), metadata=collector.md())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(e.value).metadata["field"] == "trace_id"
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await collector.get_trace(new_trace_id())
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    info = error_info(e.value)
    assert info.reason == "TRACE_NOT_FOUND" and info.metadata["retained_since"].endswith("Z")


async def test_query_needs_a_token_with_traces_read(collector):
    q = collector.query()
    req = traces_pb2.GetTraceRequest(trace_id=new_trace_id().hex())
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await q.GetTrace(req)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await q.GetTrace(req, metadata=collector.md(scopes=("chat",)))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize("hour", [0.5, 11, 23.5])
async def test_F18_retention_drops_days_past_14_and_keeps_13_day_old_spans(start_collector, hour, span_store):
    # The collector's clock is "now" (at several times of day); the pass runs 1.5 days later, when
    # the first trace is 14.5 days old (its whole day is dropped) and the second 13 days old (kept).
    real_now = time.time_ns() // DAY * DAY + int(hour * 3600 * NS)
    c = await start_collector(clock=lambda: real_now)
    old_tid, old_spans = one_trace(3, start_ns=real_now - 13 * DAY)
    kept_tid, kept_spans = one_trace(3, start_ns=real_now - int(11.5 * DAY))
    resp = await c.otlp().Export(request(old_spans + kept_spans))
    assert not resp.HasField("partial_success")
    assert len((await c.get_trace(old_tid)).spans) == 3

    later = real_now + int(1.5 * DAY)
    result = await c.server.retention.run_once(now_ns=later)
    assert result.dropped, "a day should have been dropped"
    assert len((await c.get_trace(kept_tid)).spans) == 3  # 13 days old at the pass: kept
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await c.get_trace(old_tid)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(e.value).reason == "TRACE_NOT_FOUND"  # no hint: cannot tell
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await c.get_trace(old_tid, time_hint=ts(old_spans[0].start_time_unix_nano))
    assert error_info(e.value).reason == "TRACE_EXPIRED"
    # Whole partitions went, not rows: no partition older than the window remains.
    if span_store == "postgresql":
        conn = await asyncpg.connect(c.database_url)
        try:
            names = [r[0] for r in await conn.fetch(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'traces.spans'::regclass ORDER BY 1")]
            assert len(await conn.fetch("SELECT day FROM traces.dropped_days")) == len(result.dropped)
        finally:
            await conn.close()
        assert len(names) == 14 + 3  # the 14 retained days (today included) and 3 ahead, at the pass's clock
    else:  # ClickHouse makes a day's partition on its first insert: only the kept trace's day is left
        kept_day = dt.datetime.fromtimestamp(kept_spans[0].start_time_unix_nano // NS, dt.UTC).date()
        assert await c.server.repo.stored_days() == [kept_day]
        assert [await c.server.repo.day_dropped(d) for d in result.dropped] == [True] * len(result.dropped)


async def test_search_returns_no_trace_older_than_retention_before_or_after_the_pass_drops_it(start_collector):
    # Noon; two days later the first retained day is 11 days back, and a trace stored 11.5 days back is
    # past retention: not returned from then on, whether or not a pass has dropped its day yet.
    now = time.time_ns() // DAY * DAY + 12 * 3600 * NS
    clock = [now]
    c = await start_collector(clock=lambda: clock[0])
    old_tid, old_spans = one_trace(2, start_ns=now - 11 * DAY - 13 * 3600 * NS, attrs={"case": "expiring"})
    new_tid, new_spans = one_trace(2, start_ns=now - 3600 * NS, attrs={"case": "expiring"})
    assert not (await c.otlp().Export(request(old_spans + new_spans))).HasField("partial_success")
    later = now + 2 * DAY

    async def found(**filters) -> list[str]:
        resp = await c.query().SearchTraces(traces_pb2.SearchTracesRequest(
            start_time=ts(old_spans[0].start_time_unix_nano - NS), end_time=ts(min(clock[0], later)), **filters),
            metadata=c.md())
        return [t.trace_id for t in resp.traces]

    for filters in ({"attributes": {"case": "expiring"}}, {"span_name": "root"}):  # lookup table / scan
        assert await found(**filters) == [new_tid.hex(), old_tid.hex()]
    clock[0] = later
    for filters in ({"attributes": {"case": "expiring"}}, {"span_name": "root"}):
        assert await found(**filters) == [new_tid.hex()]  # before the pass: outside the retained window
    assert (await c.server.retention.run_once()).dropped
    for filters in ({"attributes": {"case": "expiring"}}, {"span_name": "root"}):
        assert await found(**filters) == [new_tid.hex()]
    assert len((await c.get_trace(new_tid)).spans) == 2
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await c.get_trace(old_tid)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


async def test_retention_pass_is_idempotent_and_spans_too_old_for_the_window_are_rejected(start_collector):
    now = time.time_ns()
    c = await start_collector(clock=lambda: now)
    first = await c.server.retention.run_once()
    assert first.created == [] and first.dropped == []
    _, spans = one_trace(2, start_ns=now - 15 * DAY - NS)
    resp = await c.otlp().Export(request(spans))
    assert resp.partial_success.rejected_spans == 2
    assert await c.span_rows() == 0


async def test_a_common_values_pages_sort_by_earliest_match_when_a_trace_also_matched_hours_before(collector):
    """Pages of a value on many recent traces, asked twice (ClickHouse then takes them from the window's
    last hour when it can: ClickHouseStore.search_traces), with and without a trace whose first match is
    two hours back but which matches again in the last minutes: it sorts by its earliest match (last)."""
    now = time.time_ns()
    stub = collector.otlp()
    want = {}
    for value in ("dense-a", "dense-b"):
        short = [one_trace(2, start_ns=now - (10 + i) * 60 * NS, attrs={"case": value}) for i in range(5)]
        for _, spans in short:
            await stub.Export(request(spans))
        want[value] = [tid.hex() for tid, _ in short]
    long_tid, root = new_trace_id(), new_span_id()
    await stub.Export(request([span(long_tid, root, name="root", start_ns=now - 7200 * NS, attrs={"case": "dense-b"})]))
    await stub.Export(request([span(long_tid, new_span_id(), parent=root, name="late", start_ns=now - 300 * NS,
                                    attrs={"case": "dense-b"})]))
    want["dense-b"].append(long_tid.hex())

    async def pages(value: str) -> list[list[str]]:
        out, token = [], ""
        while True:
            page = await collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
                start_time=ts(now - 6 * 3600 * NS), end_time=ts(now), attributes={"case": value}, page_size=2,
                page_token=token), metadata=collector.md())
            out.append([t.trace_id for t in page.traces])
            if not (token := page.next_page_token):
                return out

    for value in ("dense-a", "dense-b", "dense-a", "dense-b", "dense-b"):
        got = await pages(value)
        assert [t for p in got for t in p] == want[value], value
        assert all(len(p) == 2 for p in got[:-1]), got
    page = await collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
        start_time=ts(now - 6 * 3600 * NS), end_time=ts(now), attributes={"case": "dense-b"}, page_size=6),
        metadata=collector.md())
    assert page.traces[-1].trace_id == long_tid.hex() and page.traces[-1].span_count == 2
    assert page.traces[-1].start_time_unix_nano == now - 7200 * NS


async def test_search_traces_filters_and_pages(collector):
    now = time.time_ns()
    stub, q = collector.otlp(), collector.query()
    tids = []
    for i in range(5):
        tid, spans = one_trace(3, start_ns=now - (10 - i) * NS, attrs={"gen_ai.tool.name": "search" if i % 2 else "read",
                                                                        "n": i})
        spans[0].status.code = 2 if i == 4 else 0
        await stub.Export(request(spans, service="agent" if i < 4 else "chat"))
        tids.append(tid.hex())
    slow_tid, slow = one_trace(2, start_ns=now - 3 * NS)
    slow[1].end_time_unix_nano = slow[1].start_time_unix_nano + 900_000_000
    await stub.Export(request(slow, service="agent"))

    def search(**kw):
        return q.SearchTraces(traces_pb2.SearchTracesRequest(
            start_time=ts(now - 60 * NS), end_time=ts(now), **kw), metadata=collector.md())

    everything = await search(page_size=100)
    assert [t.trace_id for t in everything.traces] == [slow_tid.hex(), *reversed(tids)]
    assert everything.next_page_token == ""
    s = everything.traces[1]
    assert (s.root_span_name, s.service_name, s.span_count, s.status_code) == (
        "root", "chat", 3, traces_pb2.STATUS_CODE_ERROR)
    assert s.duration_nano == 10_000_000

    assert [t.trace_id for t in (await search(service_name="chat")).traces] == [tids[4]]
    assert [t.trace_id for t in (await search(attributes={"gen_ai.tool.name": "search"})).traces] == [tids[3], tids[1]]
    assert [t.trace_id for t in (await search(attributes={"gen_ai.tool.name": "search", "n": "3"})).traces] == [tids[3]]
    assert [t.trace_id for t in (await search(status_code=traces_pb2.STATUS_CODE_ERROR)).traces] == [tids[4]]
    assert [t.trace_id for t in (await search(min_duration_ms=500)).traces] == [slow_tid.hex()]
    assert [t.trace_id for t in (await search(span_name="child-1", service_name="agent")).traces] == tids[3::-1]

    pages, token = [], ""
    while True:
        page = await search(page_size=2, page_token=token)
        pages.append([t.trace_id for t in page.traces])
        token = page.next_page_token
        if not token:
            break
    assert [t for p in pages for t in p] == [t.trace_id for t in everything.traces]
    assert [len(p) for p in pages] == [2, 2, 2]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await search(page_size=2, page_token=pages and (await search(page_size=2)).next_page_token,
                     service_name="other")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(e.value).metadata["field"] == "page_token"


async def test_one_attribute_search_is_exact_at_the_window_edges_and_pages_newest_first(collector):
    """One attribute filter alone (ClickHouse answers it from its attribute lookup table, PostgreSQL from
    its GIN index): a trace whose matching spans straddle the window's start sorts by its first match
    inside the window; '' matches only a key present with ''; pages cover the list once, in order."""
    now = time.time_ns()
    lo, hi = now - 60 * NS, now
    stub = collector.otlp()
    tids = []
    for i in range(5):  # matches at lo + 10 s ... lo + 50 s, newest last
        tid, spans = one_trace(2, start_ns=lo + (i + 1) * 10 * NS, attrs={"case": "needle"})
        await stub.Export(request(spans))
        tids.append(tid)
    straddle = new_trace_id()
    await stub.Export(request([span(straddle, new_span_id(), start_ns=lo - NS, attrs={"case": "needle"}),
                               span(straddle, new_span_id(), start_ns=lo + 25 * NS, attrs={"case": "needle"}),
                               span(straddle, new_span_id(), start_ns=lo + 26 * NS, attrs={"case": "other"})]))
    outside, spans = one_trace(1, start_ns=hi + NS, attrs={"case": "needle"})
    await stub.Export(request(spans))
    empty, spans = one_trace(1, start_ns=lo + 5 * NS, attrs={"case": ""})
    await stub.Export(request(spans))
    _, spans = one_trace(1, start_ns=lo + 6 * NS, attrs={"other": ""})  # no "case" key: not ''
    await stub.Export(request(spans))

    def search(value: str, **kw):
        return collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
            start_time=ts(lo), end_time=ts(hi), attributes={"case": value}, **kw), metadata=collector.md())

    want = [t.hex() for t in (tids[4], tids[3], tids[2], straddle, tids[1], tids[0])]
    assert [t.trace_id for t in (await search("needle")).traces] == want
    assert [t.trace_id for t in (await search("")).traces] == [empty.hex()]
    assert outside.hex() not in want
    got, token = [], ""
    while True:
        page = await search("needle", page_size=4, page_token=token)
        got.append([t.trace_id for t in page.traces])
        if not (token := page.next_page_token):
            break
    assert got == [want[:4], want[4:]]
    assert (await search("needle", page_size=4)).traces[3].span_count == 3  # the summary: the whole trace


async def test_search_traces_needs_a_time_range_of_at_most_14_days(collector):
    q = collector.query()
    now = time.time_ns()
    cases = [
        (traces_pb2.SearchTracesRequest(end_time=ts(now)), "start_time"),
        (traces_pb2.SearchTracesRequest(start_time=ts(now)), "end_time"),
        (traces_pb2.SearchTracesRequest(start_time=ts(now), end_time=ts(now - NS)), "end_time"),
        (traces_pb2.SearchTracesRequest(start_time=ts(now - 15 * DAY), end_time=ts(now)), "end_time"),
        (traces_pb2.SearchTracesRequest(start_time=ts(now - NS), end_time=ts(now), page_size=-1), "page_size"),
    ]
    for req, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await q.SearchTraces(req, metadata=collector.md())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(e.value).metadata["field"] == field
    ok = await q.SearchTraces(traces_pb2.SearchTracesRequest(start_time=ts(now - 14 * DAY), end_time=ts(now)),
                              metadata=collector.md())
    assert list(ok.traces) == []


async def test_search_and_get_bad_filters_are_invalid_argument_naming_the_field_never_internal(collector):
    """Every malformed filter is the caller's mistake: INVALID_ARGUMENT naming the field (limits:
    256 code points for names and attribute keys, 4096 for attribute values, 64 filters)."""
    q = collector.query()
    now = time.time_ns()
    ok = {"start_time": ts(now - NS), "end_time": ts(now)}

    def req(**kw) -> traces_pb2.SearchTracesRequest:
        return traces_pb2.SearchTracesRequest(**{**ok, **kw})

    def raw_ts(seconds: int, nanos: int = 0) -> timestamp_pb2.Timestamp:
        return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)

    cases = [
        (req(start_time=raw_ts(now // NS - 1, -5)), "start_time"),
        (req(end_time=raw_ts(now // NS, 1_000_000_000)), "end_time"),
        (req(start_time=raw_ts(-(10**12))), "start_time"),
        (req(end_time=raw_ts(10**12)), "end_time"),
        (req(end_time=raw_ts(10**13)), "end_time"),
        (req(span_name="\x00"), "span_name"),
        (req(service_name="svc\x00"), "service_name"),
        (req(attributes={"a\x00": "b"}), "attributes"),
        (req(attributes={"a": "b\x00"}), "attributes"),
        (req(status_code=99), "status_code"),
        (req(service_name="s" * 100_000), "service_name"),
        (req(span_name="s" * 257), "span_name"),
        (req(attributes={"k" * 257: "v"}), "attributes"),
        (req(attributes={"k": "v" * 4097}), "attributes"),
        (req(attributes={f"k{i}": "v" for i in range(65)}), "attributes"),
    ]
    for r, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await q.SearchTraces(r, metadata=collector.md())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, e.value.details())
        assert error_info(e.value).metadata["field"] == field
    # At the limits the search runs.
    at_limit = req(service_name="s" * 256, span_name="é" * 256, attributes={"k" * 256: "v" * 4096},
                   status_code=traces_pb2.STATUS_CODE_ERROR, min_duration_ms=2**62)
    assert list((await q.SearchTraces(at_limit, metadata=collector.md())).traces) == []
    # Timestamps at the ends of the Timestamp range (far outside any stored span) are valid.
    far = req(start_time=raw_ts(-62135596800), end_time=raw_ts(-62135596800 + 3600))
    assert list((await q.SearchTraces(far, metadata=collector.md())).traces) == []
    for hint, good in ((raw_ts(1, -5), False), (raw_ts(10**13), False), (raw_ts(253402300799), True)):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await collector.get_trace(new_trace_id(), time_hint=hint)
        expected = grpc.StatusCode.NOT_FOUND if good else grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.code() == expected
        if not good:
            assert error_info(e.value).metadata["field"] == "time_hint"
