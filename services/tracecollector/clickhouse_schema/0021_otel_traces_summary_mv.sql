-- Fills the trace summaries from every insert into otel_traces (ours and an exporter fleet's alike; on a
-- cluster, each shard's local one). Status as _STATUS_SQL in clickhouse.py (both enum spellings).
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.${table}_summary_mv ${on_cluster}
TO ${db}.${table}_summary
AS SELECT TraceId,
          toDate(min(Timestamp)) AS Day,
          min((ParentSpanId != '', Timestamp, CAST(SpanName, 'String'), CAST(ServiceName, 'String'), Duration)) AS Root,
          groupUniqArray(cityHash64(SpanId)) AS SpanIds,
          max(multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 2, StatusCode IN ('Ok', 'STATUS_CODE_OK'), 1, 0)) AS Status
   FROM ${db}.${table}
   WHERE TraceId != ''
   GROUP BY TraceId
