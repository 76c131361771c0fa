-- otel_traces: the OpenTelemetry Collector clickhouse exporter's span table, as the exporter creates it.
-- Source: opentelemetry-collector-contrib exporter/clickhouseexporter/internal/sqltemplates/traces_table.sql,
-- the fmt.Sprintf ("%s") generation of sqltemplates/ that otelcol-contrib 0.136.0 (deploy/'s pin) builds
-- from (read at commit f92a5763be13aeb59ecf6f8b47e31d54109191bb; exporter_traces.go renders the TTL
-- with internal.GenerateTTLExpr(cfg.TTL, "toDateTime(Timestamp)")). Only the names are substituted:
-- ${db}, ${table} (the local table when sharded), ${on_cluster}, ${engine}, ${ttl_days}.
-- Timestamp is the span's start; Duration = end - start in ns; attribute values are pcommon.Value.AsString().
CREATE TABLE IF NOT EXISTS ${db}.${table} ${on_cluster} (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = ${engine}
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
TTL toDateTime(Timestamp) + toIntervalDay(${ttl_days})
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1
