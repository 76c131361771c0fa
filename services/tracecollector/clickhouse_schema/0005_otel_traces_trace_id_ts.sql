-- otel_traces_trace_id_ts: the exporter's trace-id lookup table (first/last span start of a trace, in
-- seconds), which GetTrace reads to bound the time range it scans in otel_traces.
-- Source: exporter/clickhouseexporter/internal/sqltemplates/traces_id_ts_lookup_table.sql, same
-- generation as 0004 (TTL: internal.GenerateTTLExpr(cfg.TTL, "toDateTime(Start)")).
CREATE TABLE IF NOT EXISTS ${db}.${table}_trace_id_ts ${on_cluster} (
    TraceId String CODEC(ZSTD(1)),
    Start DateTime CODEC(Delta, ZSTD(1)),
    End DateTime CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = ${engine}
PARTITION BY toDate(Start)
ORDER BY (TraceId, Start)
TTL toDateTime(Start) + toIntervalDay(${ttl_days})
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1
