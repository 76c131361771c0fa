-- Fills the attribute lookup table from every insert into otel_traces (ours and an exporter fleet's
-- alike: a materialized view sees every INSERT, whoever sends it; on a cluster, each shard's local one).
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.${table}_attrs_mv ${on_cluster}
TO ${db}.${table}_attrs
AS SELECT Key, Value, Timestamp, TraceId
   FROM ${db}.${table}
   ARRAY JOIN mapKeys(SpanAttributes) AS Key, mapValues(SpanAttributes) AS Value
   WHERE length(Value) <= 256
