-- Ours, additive: each span once more, keyed by trace, as one JSON text (`Span`: GetTrace's columns in
-- clickhouse.py's _SPAN_COLUMNS order without TraceId, as formatRowNoNewline('JSONCompactEachRow') writes
-- them), so GetTrace is ONE statement reading 3 columns of ~3 parts: no lookup-table bounds first, no
-- planning over otel_traces' 14 daily parts and 22 columns (chdb, bench_span_stores at 600k spans, CPU
-- per call p50: 21.8 ms → 4.8 ms, SELECT 1 2.0 ms). Replaces the projection agentfeedback_by_trace (0010 no
-- longer adds it; create_schema drops it where it was made): 54.9 bytes per span here (Span ZSTD(9)) against its 47.7.
-- Weekly partitions (Monday, UTC) as 0027's attribute lookup: the retention pass drops a week once its
-- last day is past (ClickHouseStore.drop_weeks_before), GetTrace reads only spans from the first day
-- not dropped (ClickHouseStore.get_trace), and the TTL drops a week's part once all its rows are past
-- retention_days.
CREATE TABLE IF NOT EXISTS ${db}.${table}_by_trace ${on_cluster} (
    TraceId String CODEC(ZSTD(1)),
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    Span String CODEC(ZSTD(9))
) ENGINE = ${engine}
PARTITION BY toMonday(Timestamp)
ORDER BY (TraceId, Timestamp)
TTL toDateTime(Timestamp) + toIntervalDay(${ttl_days})
SETTINGS index_granularity=256, ttl_only_drop_parts = 1;
-- From which span start the trace table is complete (min(Since); none = not yet), recorded as 0017's:
-- 0 for an empty otel_traces, else past every span then stored. Until retention has dropped every day
-- before it (or a backfill recorded 0), GetTrace reads otel_traces as before 0031.
CREATE TABLE IF NOT EXISTS ${db}.${table}_by_trace_since ${on_cluster} (
    Since DateTime64(9),
    RecordedAt DateTime DEFAULT now()
) ENGINE = ${engine}
ORDER BY Since;
-- Fills the trace table from every insert into otel_traces (ours and an exporter fleet's alike; on a
-- cluster, each shard's local one). Integers (times in ns, Duration) as JSON strings or numbers,
-- whichever the inserting session's output_format_json_quote_64bit_integers says: both read back.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.${table}_by_trace_mv ${on_cluster}
TO ${db}.${table}_by_trace
AS SELECT TraceId, Timestamp,
          formatRowNoNewline('JSONCompactEachRow', SpanId, ParentSpanId, toUnixTimestamp64Nano(Timestamp), Duration,
              SpanName, SpanKind, StatusCode, StatusMessage, ServiceName, ScopeName, TraceState, SpanAttributes,
              ResourceAttributes, arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), Events.Name,
              Events.Attributes, Links.TraceId, Links.SpanId, Links.TraceState, Links.Attributes,
              AgentFeedbackTypes) AS Span
   FROM ${db}.${table}
   WHERE TraceId != ''
