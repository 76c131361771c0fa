-- Ours, additive: the span attribute lookup table (replaces 0015's `${table}_attrs`, daily partitions;
-- the view below moves here). One row per (span, attribute) whose value is at most 256 bytes, sorted by
-- (Key, Value, Timestamp), so SearchTraces finds the traces of one attribute value by primary key
-- instead of reading the bloom-filtered granules of otel_traces' Map column. Longer values are not
-- indexed (their searches scan otel_traces). Values ZSTD(3) (sorted by (Key, Value) they repeat in runs:
-- 5.25 → 3.55 bytes per span at 1M spans), TraceId ZSTD(1) (random hex; ZSTD(3) was larger).
-- Weekly partitions (Monday, UTC), where otel_traces has daily ones: a 14-day search's key range is
-- read from 3 parts instead of 14, and chdb's cost grows with the parts a statement touches
-- (bench_span_stores at 3M spans, CPU per lookup: rare over 14 days 34 → 16 ms, common over 1 day 50 →
-- 34 ms). Retention stays exact: searches are clamped to the retained window (query.TraceReader), the
-- retention pass drops a week once its last day is past (ClickHouseStore.drop_weeks_before), and the
-- TTL drops a week's part once all its rows are past retention_days.
CREATE TABLE IF NOT EXISTS ${db}.${table}_attrs_weekly ${on_cluster} (
    Key LowCardinality(String) CODEC(ZSTD(1)),
    Value String CODEC(ZSTD(3)),
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1))
) ENGINE = ${engine}
PARTITION BY toMonday(Timestamp)
ORDER BY (Key, Value, Timestamp)
TTL toDateTime(Timestamp) + toIntervalDay(${ttl_days})
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1;
-- From which span start the lookup is complete (min(Since); none = not yet). Rows stored before the
-- view existed are not in it: create_schema records, once, 0 for an empty otel_traces, else a time past
-- every span then stored; searches whose window starts earlier scan otel_traces (the backfill in
-- docs/architecture.md "Spans on ClickHouse" lowers it).
CREATE TABLE IF NOT EXISTS ${db}.${table}_attrs_weekly_since ${on_cluster} (
    Since DateTime64(9),
    RecordedAt DateTime DEFAULT now()
) ENGINE = ${engine}
ORDER BY Since
;
-- Fills the attribute lookup table from every insert into otel_traces (ours and an exporter fleet's
-- alike: a materialized view sees every INSERT, whoever sends it; on a cluster, each shard's local one).
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.${table}_attrs_weekly_mv ${on_cluster}
TO ${db}.${table}_attrs_weekly
AS SELECT Key, Value, Timestamp, TraceId
   FROM ${db}.${table}
   ARRAY JOIN mapKeys(SpanAttributes) AS Key, mapValues(SpanAttributes) AS Value
   WHERE length(Value) <= 256;
-- Deployments made before this file: the daily lookup's view stops (made above first, so no INSERT goes
-- unindexed). Its table `${table}_attrs` is no longer read or dropped by the retention pass; its own TTL
-- empties it within retention_days + 1, then it can be dropped, or copied into the weekly one first
-- (docs/architecture.md "Spans on ClickHouse").
DROP VIEW IF EXISTS ${db}.${table}_attrs_mv ${on_cluster}
