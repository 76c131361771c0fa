-- Ours, additive: the span attribute lookup table. One row per (span, attribute) whose value is at
-- most 256 bytes, sorted by (Key, Value, Timestamp), so SearchTraces finds the traces of one attribute
-- value by primary key (a rare value over 14 days: a few granules) instead of reading the bloom-filtered
-- granules of otel_traces' Map column (bench_span_stores: 201 ms → see docs/architecture.md "Spans on
-- ClickHouse"). Longer values are not indexed (their searches scan otel_traces). Partitions and TTL
-- follow otel_traces (the retention pass drops its days with otel_traces').
CREATE TABLE IF NOT EXISTS ${db}.${table}_attrs ${on_cluster} (
    Key LowCardinality(String) CODEC(ZSTD(1)),
    Value String CODEC(ZSTD(1)),
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1))
) ENGINE = ${engine}
PARTITION BY toDate(Timestamp)
ORDER BY (Key, Value, Timestamp)
TTL toDateTime(Timestamp) + toIntervalDay(${ttl_days})
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1
