"""The ClickHouse span store's schema and value forms, checked without a server: the exporter's DDL as
rendered for one server and for a cluster, and pcommon.Value.AsString() of each OTLP value type."""
from __future__ import annotations

import re

from services.tracecollector.clickhouse import Tables, schema_statements
from services.tracecollector.clickhouse_rows import INSERT_COLUMNS, as_string


def test_as_string_matches_the_exporters_attribute_strings():
    # pcommon.Value.AsString(): ints in decimal, bools lower case, doubles strconv 'f' -1, arrays and
    # maps as compact JSON, empty as ''.
    cases = [(42, "42"), (-7, "-7"), (True, "true"), (False, "false"), (1.5, "1.5"), (1.0, "1"),
             (1e20, "100000000000000000000"), (0.0001, "0.0001"), (["a", 1], '["a",1]'),
             ({"inner": "x"}, '{"inner":"x"}'), (None, ""), ("NaN", "NaN"), ("text", "text")]
    for value, want in cases:
        assert as_string(value) == want, value


def test_single_server_schema_is_the_exporters_with_ttl_daily_partitions_and_bloom_filters():
    stmts = schema_statements(Tables("otel", "otel_traces"), retention_days=14)
    traces = stmts[0]
    assert traces.startswith("CREATE TABLE IF NOT EXISTS `otel`.otel_traces")
    assert "ENGINE = MergeTree()" in traces and "PARTITION BY toDate(Timestamp)" in traces
    assert "TTL toDateTime(Timestamp) + toIntervalDay(14)" in traces and "ttl_only_drop_parts = 1" in traces
    for idx in ("idx_trace_id TraceId TYPE bloom_filter(0.001)", "idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter",
                "idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter", "idx_res_attr_key", "idx_res_attr_value"):
        assert idx in traces
    # Every column the exporter's INSERT names is declared (nested ones as Events/Links).
    for col in INSERT_COLUMNS:
        assert re.search(rf"\b{col.split('.')[-1] if '.' in col else col}\b", traces), col
    assert any("MATERIALIZED VIEW" in s and "otel_traces_trace_id_ts_mv" in s for s in stmts)
    assert any("ADD COLUMN IF NOT EXISTS AgentFeedbackTypes" in s for s in stmts)
    # Ours: each span again, keyed by trace, weekly partitions expiring as otel_traces, filled by a view
    # (so the exporter's INSERTs fill it too); the projection 0010 made before it is no longer added.
    by_trace = next(s for s in stmts if "otel_traces_by_trace " in s and s.startswith("CREATE TABLE"))
    assert "PARTITION BY toMonday(Timestamp)" in by_trace and "ORDER BY (TraceId, Timestamp)" in by_trace
    assert "TTL toDateTime(Timestamp) + toIntervalDay(14)" in by_trace and "ttl_only_drop_parts = 1" in by_trace
    assert any("MATERIALIZED VIEW" in s and "TO `otel`.otel_traces_by_trace" in s and "FROM `otel`.otel_traces\n" in s
               for s in stmts)
    assert not any("PROJECTION" in s for s in stmts)
    # Ours: the attribute lookup, weekly partitions, expiring as otel_traces, keyed for a value's traces;
    # the daily lookup's view (before 0027) dropped once the weekly one fills.
    attrs = next(s for s in stmts if "otel_traces_attrs_weekly " in s and s.startswith("CREATE TABLE"))
    assert "PARTITION BY toMonday(Timestamp)" in attrs and "ORDER BY (Key, Value, Timestamp)" in attrs
    assert "TTL toDateTime(Timestamp) + toIntervalDay(14)" in attrs and "ttl_only_drop_parts = 1" in attrs
    assert "Value String CODEC(ZSTD(3))" in attrs
    views = [i for i, s in enumerate(stmts) if "MATERIALIZED VIEW" in s and "otel_traces_attrs_weekly_mv" in s
             and "ARRAY JOIN" in s and "TO `otel`.otel_traces_attrs_weekly" in s]
    assert views and stmts.index("DROP VIEW IF EXISTS `otel`.otel_traces_attrs_mv") > views[0]
    assert not any("otel_traces_attrs " in s or "otel_traces_attrs_since " in s for s in stmts)
    # Ours: the per-trace summaries, by trace id, days and TTL following otel_traces'.
    summary = next(s for s in stmts if "otel_traces_summary " in s and s.startswith("CREATE TABLE"))
    assert "ENGINE = AggregatingMergeTree()" in summary and "ORDER BY TraceId" in summary
    assert "PARTITION BY Day" in summary and "TTL toDateTime(Day) + toIntervalDay(15)" in summary
    assert any("MATERIALIZED VIEW" in s and "otel_traces_summary_mv" in s for s in stmts)
    # ... with each trace's earliest span start (0029): the column added, the view's query replaced in place.
    assert any(s.startswith("ALTER TABLE `otel`.otel_traces_summary ") and "ADD COLUMN IF NOT EXISTS Start" in s
               for s in stmts)
    view = next(s for s in stmts if s.startswith("ALTER TABLE `otel`.otel_traces_summary_mv"))
    assert "MODIFY QUERY" in view and "min(Timestamp) AS Start" in view and "GROUP BY TraceId" in view
    assert not any("Distributed" in s or "ON CLUSTER" in s for s in stmts)
    # Storage only (0025): the exporter's table gets a default codec (what declares none: our
    # projection, the skip indexes), never a column change.
    assert any(s.startswith("ALTER TABLE `otel`.otel_traces ")
               and s.endswith("MODIFY SETTING default_compression_codec = 'ZSTD(3)'") for s in stmts)
    assert not any("otel_traces " in s and "MODIFY COLUMN" in s for s in stmts)


def test_cluster_schema_is_replicated_local_tables_under_distributed_ones_sharded_by_trace():
    stmts = schema_statements(Tables("otel", "otel_traces", cluster="spans"), retention_days=7)
    assert all("ON CLUSTER `spans`" in s for s in stmts)
    assert "otel_traces_local" in stmts[0] and "ENGINE = ReplicatedMergeTree()" in stmts[0]
    assert "toIntervalDay(7)" in stmts[0]
    dist = [s for s in stmts if "ENGINE = Distributed" in s]
    assert [d.split()[5] for d in dist] == ["`otel`.otel_traces", "`otel`.otel_traces_trace_id_ts",
                                            "`otel`.otel_traces_dropped_days", "`otel`.otel_traces_summary",
                                            "`otel`.otel_traces_summary_since", "`otel`.otel_traces_attrs_weekly",
                                            "`otel`.otel_traces_attrs_weekly_since", "`otel`.otel_traces_by_trace",
                                            "`otel`.otel_traces_by_trace_since"]
    assert "Distributed('spans', `otel`, otel_traces_local_attrs_weekly, cityHash64(TraceId))" in dist[5]
    assert "Distributed('spans', `otel`, otel_traces_local, cityHash64(TraceId))" in dist[0]
    assert "Distributed('spans', `otel`, otel_traces_local_summary, cityHash64(TraceId))" in dist[3]
    mv, summary_mv, attrs_mv, trace_mv = (s for s in stmts if "MATERIALIZED VIEW" in s)
    assert "FROM `otel`.otel_traces_local" in mv and "TO `otel`.otel_traces_local_trace_id_ts" in mv
    # Each shard's view fills its own trace table from the spans stored there.
    assert "FROM `otel`.otel_traces_local" in trace_mv and "TO `otel`.otel_traces_local_by_trace" in trace_mv
    assert "Distributed('spans', `otel`, otel_traces_local_by_trace, cityHash64(TraceId))" in dist[7]
    # Each shard's view fills its own attribute lookup from the spans stored there.
    assert "FROM `otel`.otel_traces_local" in attrs_mv and "TO `otel`.otel_traces_local_attrs_weekly" in attrs_mv
    assert "DROP VIEW IF EXISTS `otel`.otel_traces_local_attrs_mv ON CLUSTER `spans`" in stmts
    # ... and its trace summaries, aggregated by the replicated engine.
    assert "FROM `otel`.otel_traces_local" in summary_mv and "TO `otel`.otel_traces_local_summary" in summary_mv
    assert any(s.startswith("ALTER TABLE `otel`.otel_traces_summary ON CLUSTER `spans`") and "ADD COLUMN IF NOT EXISTS Start"
               in s for s in stmts)  # the Distributed table's column, as its shards'
    summary = next(s for s in stmts if "otel_traces_local_summary " in s and s.startswith("CREATE TABLE"))
    assert "ENGINE = ReplicatedAggregatingMergeTree()" in summary and "toIntervalDay(8)" in summary
