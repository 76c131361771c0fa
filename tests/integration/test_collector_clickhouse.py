"""The ClickHouse span store reads rows an OpenTelemetry Collector's clickhouse exporter wrote: rows built
here with the exporter's column layout (its INSERT, exporter/clickhouseexporter/internal/sqltemplates/
traces_insert.sql; values as exporter_traces.go's pushTraceData makes them) read back through GetTrace
and SearchTraces exactly like the same spans our own receiver wrote."""
from __future__ import annotations

import datetime as dt
import os
import time

import pytest
from agentfeedback.traces.v1 import traces_pb2

from services.tracecollector.clickhouse import schema_statements, span_record
from services.tracecollector.clickhouse_rows import INSERT_COLUMNS
from services.tracecollector.clickhouse_transport import ClickHouseError
from tests.helpers.otlp import NS, kv, new_span_id, new_trace_id, one_trace, request, span, ts

pytestmark = pytest.mark.parametrize("span_store", ["clickhouse"], indirect=True)
DAY = 86_400 * NS
# The backfill of docs/architecture.md "Spans on ClickHouse" (single server), as an operator runs it.
BACKFILL = """
INSERT INTO {db}.{t}_attrs_weekly (Key, Value, Timestamp, TraceId)
SELECT Key, Value, Timestamp, TraceId FROM {db}.{t}
ARRAY JOIN mapKeys(SpanAttributes) AS Key, mapValues(SpanAttributes) AS Value
WHERE length(Value) <= 256 AND Timestamp < (SELECT min(Since) FROM {db}.{t}_attrs_weekly_since);
INSERT INTO {db}.{t}_attrs_weekly_since (Since) VALUES (0)"""


def _dt(ns: int) -> str:
    return f"{ns // NS}.{ns % NS:09d}"


def exporter_rows(tid: bytes, root: bytes, child: bytes, start: int, *, old_enum_names: bool = False) -> list[dict]:
    """Two spans as the exporter appends them: hex ids, '' for no parent, pdata's SpanKind/StatusCode
    String() ("Server", "Error"; before pdata 0.63 the exporter wrote "SPAN_KIND_SERVER"), Duration in ns,
    resource service.name in ServiceName, every attribute value as pcommon.Value.AsString()."""
    kind = "SPAN_KIND_SERVER" if old_enum_names else "Server"
    error = "STATUS_CODE_ERROR" if old_enum_names else "Error"
    resource = {"service.name": "chat", "host.name": "h1"}
    common = {"TraceState": "", "ServiceName": "chat", "ResourceAttributes": resource, "ScopeName": "tests",
              "ScopeVersion": "1.0"}
    return [
        {**common, "Timestamp": _dt(start), "TraceId": tid.hex(), "SpanId": root.hex(), "ParentSpanId": "",
         "SpanName": "chat.turn", "SpanKind": kind, "SpanAttributes": {"s": "text", "gen_ai.tool.name": "search"},
         "Duration": 50_000_000, "StatusCode": error, "StatusMessage": "agent failed",
         "Events.Timestamp": [_dt(start + 1)], "Events.Name": ["chat.in"], "Events.Attributes": [{"message.id": "m1"}],
         "Links.TraceId": [], "Links.SpanId": [], "Links.TraceState": [], "Links.Attributes": []},
        {**common, "Timestamp": _dt(start + 1000), "TraceId": tid.hex(), "SpanId": child.hex(),
         "ParentSpanId": root.hex(), "SpanName": "tool.call", "SpanKind": "Client" if not old_enum_names else
         "SPAN_KIND_CLIENT", "SpanAttributes": {}, "Duration": 0, "StatusCode": "Unset", "StatusMessage": "",
         "Events.Timestamp": [], "Events.Name": [], "Events.Attributes": [],
         "Links.TraceId": ["11" * 16], "Links.SpanId": ["22" * 8], "Links.TraceState": [""],
         "Links.Attributes": [{"why": "caller"}]},
    ]


def receiver_request(tid: bytes, root_id: bytes, child_id: bytes, start: int):
    """The same two spans as OTLP (what our receiver is sent)."""
    root = span(tid, root_id, name="chat.turn", start_ns=start, duration_ns=50_000_000, kind=2,
                attrs={"s": "text", "gen_ai.tool.name": "search"})
    root.status.code, root.status.message = 2, "agent failed"
    root.events.add(name="chat.in", time_unix_nano=start + 1, attributes=[kv("message.id", "m1")])
    child = span(tid, child_id, parent=root_id, name="tool.call", start_ns=start + 1000, duration_ns=0, kind=3)
    child.links.add(trace_id=b"\x11" * 16, span_id=b"\x22" * 8, attributes=[kv("why", "caller")])
    req = request([root, child], service="chat")
    req.resource_spans[0].resource.attributes.append(kv("host.name", "h1"))
    return req


async def _insert_as_exporter(collector, rows: list[dict]) -> None:
    import orjson

    store = collector.server.repo
    payload = b"\n".join(orjson.dumps(r) for r in rows)
    await store._tx.insert(store._traces, INSERT_COLUMNS, payload, "JSONEachRow")  # the exporter's 22 columns only


def _without_trace_id(t: traces_pb2.Trace) -> list[traces_pb2.Span]:
    out = []
    for s in t.spans:
        c = traces_pb2.Span()
        c.CopyFrom(s)
        c.trace_id = ""
        out.append(c)
    return out


@pytest.mark.parametrize("old_enum_names", [False, True])
async def test_rows_the_exporter_wrote_read_back_like_spans_our_receiver_wrote(collector, old_enum_names):
    start = time.time_ns() - 20 * NS
    ours, theirs = new_trace_id(), new_trace_id()
    root, child = new_span_id(), new_span_id()
    await collector.otlp().Export(receiver_request(ours, root, child, start))
    await _insert_as_exporter(collector, exporter_rows(theirs, root, child, start, old_enum_names=old_enum_names))

    a, b = await collector.get_trace(ours), await collector.get_trace(theirs)
    assert b.trace_id == theirs.hex() and len(b.spans) == 2
    assert _without_trace_id(a) == _without_trace_id(b)
    r, c = b.spans
    assert (r.kind, r.status_code, r.status_message) == (traces_pb2.SPAN_KIND_SERVER, traces_pb2.STATUS_CODE_ERROR,
                                                         "agent failed")
    assert (r.start_time_unix_nano, r.end_time_unix_nano) == (start, start + 50_000_000)  # exact ns
    assert r.events[0].time_unix_nano == start + 1 and c.links[0].attributes["why"] == "caller"
    assert c.kind == traces_pb2.SPAN_KIND_CLIENT and c.parent_span_id == root.hex()

    def search(**kw):
        return collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
            start_time=ts(start - NS), end_time=ts(start + NS), **kw), metadata=collector.md())

    for kw in ({"attributes": {"gen_ai.tool.name": "search"}}, {"service_name": "chat", "span_name": "chat.turn"},
               {"status_code": traces_pb2.STATUS_CODE_ERROR}, {"min_duration_ms": 50}):
        found = await search(**kw)
        assert sorted(t.trace_id for t in found.traces) == sorted([ours.hex(), theirs.hex()]), kw
        summaries = {t.trace_id: t for t in found.traces}
        x, y = summaries[ours.hex()], summaries[theirs.hex()]
        assert (x.root_span_name, x.span_count, x.status_code, x.duration_nano) == (
            y.root_span_name, y.span_count, y.status_code, y.duration_nano) == ("chat.turn", 2, 2, 50_000_000)


async def test_attribute_types_the_exporter_does_not_keep_read_as_its_strings(collector):
    """The documented difference: the exporter's Map(String, String) keeps `AsString()` of each value, so
    its rows read back as strings; our receiver's rows keep int/double/bool/array/kvlist types."""
    start = time.time_ns() - 5 * NS
    ours, theirs = new_trace_id(), new_trace_id()
    sid = new_span_id()
    await collector.otlp().Export(request([span(ours, sid, start_ns=start, attrs={
        "i": 42, "d": 1.5, "b": True, "arr": ["a", 1], "kv": {"inner": "x"}})]))
    row = exporter_rows(theirs, sid, new_span_id(), start)[0]
    row["SpanAttributes"] = {"i": "42", "d": "1.5", "b": "true", "arr": '["a",1]', "kv": '{"inner":"x"}'}
    await _insert_as_exporter(collector, [row])
    typed = (await collector.get_trace(ours)).spans[0].attributes
    assert (typed["i"], typed["d"], typed["b"], list(typed["arr"]), typed["kv"]["inner"]) == (42, 1.5, True, ["a", 1], "x")
    strings = (await collector.get_trace(theirs)).spans[0].attributes
    assert dict(strings) == {"i": "42", "d": "1.5", "b": "true", "arr": '["a",1]', "kv": '{"inner":"x"}'}
    # Searching the string form finds both, as the exporter's users query them.
    found = await collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
        start_time=ts(start - NS), end_time=ts(start + NS), attributes={"i": "42", "b": "true"}),
        metadata=collector.md())
    assert sorted(t.trace_id for t in found.traces) == sorted([ours.hex(), theirs.hex()])


async def test_the_table_ttl_follows_retention_days_on_tables_made_earlier(start_collector, collector_store):
    first = await start_collector(retention_days=14)
    store = first.server.repo
    await start_collector(retention_days=7)
    for table in ("otel_traces", "otel_traces_trace_id_ts"):
        (ddl,), = await store._tx.query(f"SHOW CREATE TABLE {store._t.q(table)}")
        assert "toIntervalDay(7)" in ddl and "toIntervalDay(14)" not in ddl, ddl


async def test_the_engine_ping_answers_beside_queued_work_and_fails_on_a_stalled_statement(collector_store):
    import asyncio

    tx = collector_store[1]["span_transport"]
    # The process's default executor (where statements wait for the engine) is full: the health
    # check's ping must not queue behind it (its 1 s timeout would flap health NOT_SERVING).
    loop = asyncio.get_running_loop()
    workers = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default, which asyncio's is
    blockers = [loop.run_in_executor(None, time.sleep, 1.0) for _ in range(workers + 1)]
    t0 = time.monotonic()
    await asyncio.wait_for(tx.ping(), 0.5)
    assert time.monotonic() - t0 < 0.5
    await asyncio.gather(*blockers)
    # A statement holding the engine is the engine answering, until it has run for STALLED_S.
    tx.STALLED_S = 0.3
    try:
        running = asyncio.create_task(tx.query("SELECT sleepEachRow(0.4) FROM numbers(2)"))
        await asyncio.sleep(0.1)
        await asyncio.wait_for(tx.ping(), 0.2)
        await asyncio.sleep(0.4)
        with pytest.raises(ClickHouseError, match="held the engine"):
            await tx.ping()
        await running
        await tx.ping()
    finally:
        del tx.STALLED_S


async def test_a_statement_runs_with_its_own_query_settings(collector_store):
    tx = collector_store[1]["span_transport"]
    assert await tx.query("SELECT getSetting('max_block_size')", settings={"max_block_size": 1234}) == [(1234,)]
    assert await tx.query("SELECT getSetting('max_block_size')") != [(1234,)]  # for that statement only
    with pytest.raises(ValueError, match="setting name"):
        await tx.query("SELECT 1", settings={"max_threads = 2, x": 1})


async def _made_now_over_stored_rows(store, table: str, since_table: str) -> int:
    """As if a lookup table filled by a view (`table`, its coverage `since_table`) were created now over the
    rows stored: both emptied, the schema made again; the coverage start (ns) it records."""
    for t in (table, since_table):
        await store._tx.command(f"TRUNCATE TABLE {t}")
    store._since.clear()
    await store.create_schema(14)
    (since,), = await store._tx.query(f"SELECT toUnixTimestamp64Nano(min(Since)) FROM {since_table}")
    return int(since)


def _statements(store, monkeypatch) -> list[str]:
    """Records the SQL of every query `store` runs from now on (the list it returns)."""
    seen: list[str] = []
    query = store._tx.query

    async def recording(sql, params=None, settings=None):
        seen.append(sql)
        return await query(sql, params, settings=settings)

    monkeypatch.setattr(store._tx, "query", recording)
    return seen


async def test_get_trace_is_one_statement_reading_one_granule_of_the_trace_table(collector, monkeypatch):
    store = collector.server.repo
    # One part of 3 span names × 10,000 traces, written to otel_traces (the trace table's view fills it).
    await store._tx.command(
        f"INSERT INTO {store._traces} (Timestamp, TraceId, SpanId, SpanName, ServiceName)"
        " SELECT now64(9) - intDiv(number, 3), leftPad(lower(hex(intDiv(number, 3) + 1)), 32, '0'),"
        " leftPad(lower(hex(number + 1)), 16, '0'), ['a', 'b', 'c'][number % 3 + 1], 'svc' FROM numbers(30000)")
    tid = "0" * 28 + "1234"
    assert [s.name for s in await store.get_trace(bytes.fromhex(tid))] == ["a", "b", "c"]  # one start, by span id
    seen = _statements(store, monkeypatch)
    assert [s.name for s in await store.get_trace(bytes.fromhex(tid))] == ["a", "b", "c"]
    assert seen == [store._get_trace_one], seen  # no lookup-table bounds, no read of otel_traces
    plan = "\n".join(r[0] for r in await store._tx.query("EXPLAIN indexes = 1 " + store._get_trace_one,
                                                          {"tid": tid, "kept": 0}))
    assert "Granules: 1/" in plan, plan


async def test_rows_the_exporter_wrote_read_back_through_the_trace_table_as_from_otel_traces(collector, monkeypatch):
    """The trace table's view sees the exporter's INSERT as ours: GetTrace's one statement there returns
    what the two-statement read of otel_traces returns (before 0031), for both writers' rows."""
    store = collector.server.repo
    start = time.time_ns() - 20 * NS
    ours, theirs = new_trace_id(), new_trace_id()
    root, child = new_span_id(), new_span_id()
    await collector.otlp().Export(receiver_request(ours, root, child, start))
    await collector.otlp().Export(receiver_request(ours, root, child, start))  # a retry: one span per id
    await _insert_as_exporter(collector, exporter_rows(theirs, root, child, start))
    for tid in (ours, theirs):
        rows = await store._tx.query(f"SELECT count() FROM {store._by_trace} WHERE TraceId = {{t:String}}",
                                     {"t": tid.hex()})
        assert rows == [(4 if tid == ours else 2,)]
        await store.get_trace(tid)  # the coverage and the retained days, read once a minute
        seen = _statements(store, monkeypatch)
        fast = await store.get_trace(tid)
        assert seen == [store._get_trace_one], seen
        bounds = await store._time_bounds([tid.hex()])
        slow = [span_record(r) for r in await store._tx.query(store._get_trace, {"tid": tid.hex(), **bounds})]
        assert fast == slow and len(fast) == 2


async def test_traces_stored_before_the_trace_table_existed_are_read_from_otel_traces(start_collector, monkeypatch):
    """An existing deployment: spans the trace table's view never saw are read from otel_traces until
    retention has dropped every day before the table's coverage (or a backfill recorded 0)."""
    now = time.time_ns()
    c = await start_collector(clock=lambda: now)
    store = c.server.repo
    tid, spans = one_trace(3, start_ns=now - 2 * DAY)
    await c.otlp().Export(request(spans))
    # As if made now over these rows: empty, with no coverage recorded.
    since = await _made_now_over_stored_rows(store, store._by_trace, store._by_trace_since)
    assert since > now
    seen = _statements(store, monkeypatch)
    assert len((await c.get_trace(tid)).spans) == 3
    assert store._get_trace in seen and store._get_trace_one not in seen, seen
    # A backfill (an operator's INSERT ... SELECT through the view's query, then coverage 0) moves it over.
    view = next(s for s in schema_statements(store._t, 14) if "_by_trace_mv" in s)
    await store._tx.command(f"INSERT INTO {store._by_trace} {view[view.index('SELECT'):]}")
    await store._tx.command(f"INSERT INTO {store._by_trace_since} (Since) VALUES (0)")
    store._since.clear()
    assert len((await c.get_trace(tid)).spans) == 3
    seen.clear()
    assert len((await c.get_trace(tid)).spans) == 3
    assert seen == [store._get_trace_one], seen


async def test_the_projection_0010_made_is_dropped_and_only_where_it_exists(collector):
    store = collector.server.repo
    tid, spans = one_trace(2, start_ns=time.time_ns() - 60 * NS)
    await collector.otlp().Export(request(spans))

    async def state():
        rows = await store._tx.query(
            "SELECT (SELECT count() FROM system.projections WHERE database = {db:String} AND table = {t:String}),"
            " (SELECT count() FROM system.mutations WHERE database = {db:String} AND table = {t:String})",
            {"db": store._t.database, "t": store._t.local})
        return tuple(int(x) for x in rows[0])

    assert await state() == (0, 0)
    await store.create_schema(14)
    assert await state() == (0, 0)  # no mutation of the span table's parts at each start
    # A deployment made before 0031: the projection 0010 added goes at the next start.
    await store._tx.command(f"ALTER TABLE {store._traces} ADD PROJECTION agentfeedback_by_trace"
                            " (SELECT * ORDER BY (TraceId, Timestamp))")
    await store.create_schema(14)
    assert (await state())[0] == 0
    assert len((await collector.get_trace(tid)).spans) == 2


async def test_a_day_retention_dropped_is_not_read_from_the_trace_tables_week(start_collector):
    """The trace table keeps a week until its last day is past; GetTrace reads only from the first day
    the retention pass has not dropped, so a dropped day's trace is TRACE_EXPIRED as on PostgreSQL."""
    now = time.time_ns()
    c = await start_collector(clock=lambda: now)
    store = c.server.repo
    old, spans = one_trace(2, start_ns=now - 13 * DAY)
    kept, kept_spans = one_trace(2, start_ns=now - 12 * DAY)
    await c.otlp().Export(request(spans + kept_spans))
    old_day = dt.datetime.fromtimestamp((now - 13 * DAY) // NS, dt.UTC).date()
    at = int(dt.datetime.combine(old_day + dt.timedelta(days=1), dt.time(), dt.UTC).timestamp()) * NS + 14 * DAY - NS
    result = await c.server.retention.run_once(now_ns=at)
    assert old_day in result.dropped
    assert await store.get_trace(old) == []
    assert len(await store.get_trace(kept)) == 2
    rows = await store._tx.query(f"SELECT count() FROM {store._by_trace} WHERE TraceId = {{t:String}}", {"t": old.hex()})
    if old_day.weekday() != 6:  # its week still has a retained day: its rows are there, not read
        assert rows == [(2,)]


async def _attr_rows(store, value: str) -> int:
    return int((await store._tx.query(f"SELECT count() FROM {store._attrs} WHERE Value = {{v:String}}",
                                      {"v": value}))[0][0])


async def test_a_rare_attribute_on_rows_the_exporter_wrote_is_found_through_the_attribute_lookup(collector):
    """The lookup table's materialized view indexes every INSERT into otel_traces, the exporter's too."""
    start = time.time_ns() - 20 * NS
    theirs = new_trace_id()
    rows = exporter_rows(theirs, new_span_id(), new_span_id(), start)
    rows[1]["SpanAttributes"] = {"bench.case": "needle"}
    await _insert_as_exporter(collector, rows)
    assert await _attr_rows(collector.server.repo, "needle") == 1
    found = await collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
        start_time=ts(start - 13 * DAY), end_time=ts(start + NS), attributes={"bench.case": "needle"}),
        metadata=collector.md())
    assert [(t.trace_id, t.root_span_name, t.span_count) for t in found.traces] == [(theirs.hex(), "chat.turn", 2)]


async def test_retention_drops_the_attribute_lookups_week_once_its_last_day_is_past(start_collector):
    now = time.time_ns()
    c = await start_collector(clock=lambda: now)
    old, spans = one_trace(2, start_ns=now - 13 * DAY, attrs={"case": "old-needle"})
    await c.otlp().Export(request(spans))
    store = c.server.repo
    assert await _attr_rows(store, "old-needle") == 2
    old_day = dt.datetime.fromtimestamp((now - 13 * DAY) // NS, dt.UTC).date()
    monday = old_day - dt.timedelta(days=old_day.weekday())
    # The pass that drops the old day leaves its week while a later day of it is retained.
    last_kept = monday + dt.timedelta(days=6)  # the week's Sunday, the first retained day
    at = int(dt.datetime.combine(last_kept, dt.time(), dt.UTC).timestamp()) * NS + 14 * DAY - NS
    if last_kept > old_day:
        result = await c.server.retention.run_once(now_ns=at)
        assert old_day in result.dropped
        assert await _attr_rows(store, "old-needle") == 2
    result = await c.server.retention.run_once(now_ns=at + DAY)  # the Sunday is past too
    assert await _attr_rows(store, "old-needle") == 0
    assert old_day in result.dropped or await store.day_dropped(old_day)


async def test_spans_stored_before_the_lookup_existed_are_found_by_scan_until_backfilled(start_collector):
    """An existing deployment: otel_traces holds spans the view never saw. Searches over them scan
    otel_traces until the backfill (docs/architecture.md "Spans on ClickHouse") indexes them."""
    c = await start_collector()
    store = c.server.repo
    start = time.time_ns() - 3600 * NS
    tid, spans = one_trace(2, start_ns=start, attrs={"case": "before"})
    await c.otlp().Export(request(spans))
    # As if made now over these rows: empty, with no coverage recorded.
    since = await _made_now_over_stored_rows(store, store._attrs, store._attrs_since)
    assert since > time.time_ns()  # past every stored span: nothing older is taken from the lookup

    def search():
        return c.query().SearchTraces(traces_pb2.SearchTracesRequest(
            start_time=ts(start - NS), end_time=ts(start + NS), attributes={"case": "before"}), metadata=c.md())

    assert [t.trace_id for t in (await search()).traces] == [tid.hex()]  # by scan
    db, t = f"`{store._t.database}`", store._t.traces
    for stmt in BACKFILL.format(db=db, t=t).split(";"):
        await store._tx.command(stmt)
    assert await _attr_rows(store, "before") == 2
    store._since.clear()
    assert [t.trace_id for t in (await search()).traces] == [tid.hex()]  # from the lookup


async def test_a_deployment_made_before_the_weekly_lookup_moves_its_view_there(start_collector):
    """Tables as migrations 0015/0016 made them (the daily lookup and its view) on a store that holds
    spans: create_schema makes the weekly lookup, drops the daily view (new INSERTs fill the weekly table
    only) and records the weekly coverage past the stored spans, so searches over them scan until backfilled."""
    c = await start_collector()
    store = c.server.repo
    db, t = f"`{store._t.database}`", store._t.traces
    await store._tx.command(f"DROP VIEW {db}.{t}_attrs_weekly_mv")
    for table in (store._attrs, store._attrs_since):
        await store._tx.command(f"DROP TABLE {table}")
    await store._tx.command(f"""CREATE TABLE {db}.{t}_attrs (Key LowCardinality(String), Value String,
        Timestamp DateTime64(9), TraceId String) ENGINE = MergeTree() PARTITION BY toDate(Timestamp)
        ORDER BY (Key, Value, Timestamp)""")
    await store._tx.command(f"""CREATE MATERIALIZED VIEW {db}.{t}_attrs_mv TO {db}.{t}_attrs AS SELECT Key,
        Value, Timestamp, TraceId FROM {db}.{t} ARRAY JOIN mapKeys(SpanAttributes) AS Key,
        mapValues(SpanAttributes) AS Value WHERE length(Value) <= 256""")
    start = time.time_ns() - 3600 * NS
    before, spans = one_trace(2, start_ns=start, attrs={"case": "upgrade"})
    await c.otlp().Export(request(spans))
    store._since.clear()
    await store.create_schema(14)
    names = {n for (n,) in await store._tx.query(
        "SELECT name FROM system.tables WHERE database = {db:String}", {"db": store._t.database})}
    assert f"{t}_attrs_mv" not in names and {f"{t}_attrs_weekly", f"{t}_attrs_weekly_mv"} <= names
    after, spans = one_trace(2, start_ns=start + NS, attrs={"case": "upgrade"})
    await c.otlp().Export(request(spans))
    daily = await store._tx.query(f"SELECT DISTINCT TraceId FROM {db}.{t}_attrs")
    assert daily == [(before.hex(),)]
    assert await store._tx.query(f"SELECT DISTINCT TraceId FROM {store._attrs}") == [(after.hex(),)]
    found = await c.query().SearchTraces(traces_pb2.SearchTracesRequest(
        start_time=ts(start - NS), end_time=ts(start + 2 * NS), attributes={"case": "upgrade"}), metadata=c.md())
    assert [x.trace_id for x in found.traces] == [after.hex(), before.hex()]  # by scan: coverage starts later


async def _codecs(store) -> set[tuple[str, str]]:
    """(part, default codec) of every active part of the span table and of its projection (the lookup
    table's columns all declare theirs: system.columns)."""
    rows = await store._tx.query(
        "SELECT name, default_compression_codec FROM system.parts WHERE database = {db:String} AND table = {t:String}"
        " AND active UNION ALL SELECT concat(parent_name, '.', name), default_compression_codec"
        " FROM system.projection_parts WHERE database = {db:String} AND table = {t:String} AND active",
        {"db": store._t.database, "t": store._t.local})
    return {(r[0], r[1]) for r in rows}


async def test_the_codec_migrations_change_only_storage_on_tables_made_before_them(collector):
    """Migration 0025 on a table that already holds parts (an existing deployment, an exporter fleet's
    table): metadata only; parts written before read back the same, new and merged parts get ZSTD(3).
    The attribute lookup's columns keep the codecs 0027 declares."""
    store = collector.server.repo
    # The span table as 0004-0010 made it: the projection in the server's default codec.
    await store._tx.command(f"ALTER TABLE {store._traces} RESET SETTING default_compression_codec")
    start = time.time_ns() - 60 * NS
    old, spans = one_trace(3, start_ns=start, attrs={"case": "codec"})
    await collector.otlp().Export(request(spans))
    before, old_parts = await collector.get_trace(old), await _codecs(store)
    assert len(before.spans) == 3
    await store.create_schema(14)
    (ddl,), = await store._tx.query(f"SHOW CREATE TABLE {store._traces}")
    assert "default_compression_codec = 'ZSTD(3)'" in ddl, ddl
    new, spans = one_trace(2, start_ns=start + NS, attrs={"case": "codec"})
    await collector.otlp().Export(request(spans))
    parts = await _codecs(store)
    assert old_parts < parts and {c for _, c in parts - old_parts} == {"ZSTD(3)"}  # old parts not rewritten
    assert await collector.get_trace(old) == before  # a part written before, read as written
    for table in (store._traces, store._attrs):
        await store._tx.command(f"OPTIMIZE TABLE {table} FINAL")
    assert {c for _, c in await _codecs(store)} == {"ZSTD(3)"}  # merged: recompressed
    assert await collector.get_trace(old) == before
    columns = dict(await store._tx.query(
        "SELECT name, compression_codec FROM system.columns WHERE database = {db:String} AND table = {t:String}",
        {"db": store._t.database, "t": f"{store._t.local}_attrs_weekly"}))
    assert columns == {"Key": "CODEC(ZSTD(1))", "Value": "CODEC(ZSTD(3))", "Timestamp": "CODEC(Delta(8), ZSTD(1))",
                       "TraceId": "CODEC(ZSTD(1))"}
    found = await collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
        start_time=ts(start - NS), end_time=ts(start + 2 * NS), attributes={"case": "codec"}), metadata=collector.md())
    assert [x.trace_id for x in found.traces] == [new.hex(), old.hex()]


async def test_a_page_summarizes_from_the_trace_summary_table_across_inserts_and_retries(collector):
    """The summary view fires on the exporter's INSERTs too; a trace split over INSERTs (child first, root
    later) and an exporter retry of the same spans read as one trace: its root, 2 spans, worst status."""
    start = time.time_ns() - 20 * NS
    tid, root, child = new_trace_id(), new_span_id(), new_span_id()
    root_row, child_row = exporter_rows(tid, root, child, start)
    for rows in ([child_row], [root_row], [root_row, child_row]):  # the last: a retry of both
        await _insert_as_exporter(collector, rows)
    store = collector.server.repo
    rows = await store._tx.query(store._summary_sql, {"ids": [tid.hex()]})
    # ... and the trace's earliest span start (the root's here; the child, inserted first, starts later).
    assert [r[1:] for r in rows] == [("chat.turn", "chat", start, 50_000_000, 2, 2, start)]
    found = await collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
        start_time=ts(start - NS), end_time=ts(start + NS), attributes={"gen_ai.tool.name": "search"}),
        metadata=collector.md())
    assert [(t.trace_id, t.root_span_name, t.service_name, t.start_time_unix_nano, t.duration_nano, t.span_count,
             t.status_code) for t in found.traces] == [(tid.hex(), "chat.turn", "chat", start, 50_000_000, 2, 2)]


async def test_traces_summarized_before_their_start_was_kept_are_paged_from_the_whole_window(collector):
    """Summary rows made before migration 0029 have Start 1970: a common value's page holding them is not
    taken from the last hour (ClickHouseStore.search_traces tries, then reads the whole window)."""
    now = time.time_ns()
    traces = [one_trace(2, start_ns=now - (10 + i) * 60 * NS, attrs={"case": "pre-0029"}) for i in range(4)]
    for _, spans in traces:
        await collector.otlp().Export(request(spans))
    store = collector.server.repo
    await store._tx.command(f"ALTER TABLE {store._summary} UPDATE Start = toDateTime64(0, 9) WHERE 1"
                            " SETTINGS mutations_sync = 2")

    async def first_page() -> list[str]:
        page = await collector.query().SearchTraces(traces_pb2.SearchTracesRequest(
            start_time=ts(now - 6 * 3600 * NS), end_time=ts(now), attributes={"case": "pre-0029"}, page_size=2),
            metadata=collector.md())
        return [t.trace_id for t in page.traces]

    want = [tid.hex() for tid, _ in traces[:2]]
    assert await first_page() == want
    assert store._dense[("case", "pre-0029")]  # a recent page: the next one tries the last hour
    assert await first_page() == want
    assert not store._dense[("case", "pre-0029")]  # its traces' Start is unknown: whole window from now on


async def test_traces_stored_before_the_summary_table_existed_are_summarized_from_otel_traces(start_collector):
    """An existing deployment: traces the summary view never saw (or saw only in part) are summarized
    from otel_traces, so a page's summaries are whole either way."""
    c = await start_collector()
    store = c.server.repo
    start = time.time_ns() - 3600 * NS
    before, spans = one_trace(3, start_ns=start, attrs={"case": "summary"})
    await c.otlp().Export(request(spans))
    # As if made now over these rows: empty, with no coverage recorded.
    since = await _made_now_over_stored_rows(store, store._summary, store._summary_since)
    assert since > time.time_ns()
    # One more span of the old trace arrives now: the view sees only it.
    extra = span(before, new_span_id(), parent=spans[0].span_id, name="late", start_ns=start + NS)
    await c.otlp().Export(request([extra]))
    found = await c.query().SearchTraces(traces_pb2.SearchTracesRequest(
        start_time=ts(start - NS), end_time=ts(start + 2 * NS), attributes={"case": "summary"}), metadata=c.md())
    assert [(t.trace_id, t.span_count, t.start_time_unix_nano) for t in found.traces] == [(before.hex(), 4, start)]
