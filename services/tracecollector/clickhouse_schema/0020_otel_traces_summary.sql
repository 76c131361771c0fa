-- Ours, additive: one row per trace (per INSERT block until merges combine them) with what a
-- SearchTraces page shows: the root span (no parent, else the earliest: the min of (has parent, start,
-- name, service, duration), as SUMMARIZE's argMin), the span ids (cityHash64, so span_count collapses
-- duplicates as uniqExact(SpanId)), the worst status. ORDER BY TraceId with small granules, so a page's
-- 51 ids read ~51 granules of 256 rows per day instead of the pages' days of otel_traces through the
-- TraceId bloom filter (and no lookup-table bounds first). Day = the block's first span start day:
-- partitions follow otel_traces' days (the retention pass drops them with otel_traces'); the TTL keeps
-- a day one more day, as otel_traces' parts expire by their newest span.
CREATE TABLE IF NOT EXISTS ${db}.${table}_summary ${on_cluster} (
    TraceId String CODEC(ZSTD(1)),
    Day Date CODEC(Delta, ZSTD(1)),
    Root SimpleAggregateFunction(min, Tuple(UInt8, DateTime64(9), String, String, UInt64)) CODEC(ZSTD(1)),
    SpanIds SimpleAggregateFunction(groupUniqArrayArray, Array(UInt64)) CODEC(ZSTD(1)),
    Status SimpleAggregateFunction(max, UInt8) CODEC(ZSTD(1))
) ENGINE = ${agg_engine}
PARTITION BY Day
ORDER BY TraceId
TTL toDateTime(Day) + toIntervalDay(${ttl_days_plus_1})
SETTINGS index_granularity=256, ttl_only_drop_parts = 1
