-- The exporter's materialized view filling the lookup table from every insert into otel_traces.
-- Source: exporter/clickhouseexporter/internal/sqltemplates/traces_id_ts_lookup_mv.sql
-- (commit 57b29d74154d72320747c8dd2a0b4a1629a39187).
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.${table}_trace_id_ts_mv ${on_cluster}
TO ${db}.${table}_trace_id_ts
AS SELECT
              TraceId,
              min(Timestamp) as Start,
              max(Timestamp) as End
   FROM ${db}.${table}
   WHERE TraceId != ''
   GROUP BY TraceId
