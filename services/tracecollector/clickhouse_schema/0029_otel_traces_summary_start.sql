-- Ours (0020's table): each trace's earliest span start (min over its rows, as Root), so a page of a
-- common attribute value can be taken from the window's last hour alone when every trace on it started
-- there (ClickHouseStore.search_traces). Rows summarized before this column have 1970 (their traces are
-- never taken that way); the view's query (0021's, plus Start) is replaced in place, so no INSERT goes
-- unsummarized.
ALTER TABLE ${db}.${table}_summary ${on_cluster}
ADD COLUMN IF NOT EXISTS Start SimpleAggregateFunction(min, DateTime64(9)) DEFAULT toDateTime64(0, 9) CODEC(Delta, ZSTD(1));
ALTER TABLE ${db}.${table}_summary_mv ${on_cluster} MODIFY QUERY
   SELECT TraceId,
          toDate(min(Timestamp)) AS Day,
          min((ParentSpanId != '', Timestamp, CAST(SpanName, 'String'), CAST(ServiceName, 'String'), Duration)) AS Root,
          groupUniqArray(cityHash64(SpanId)) AS SpanIds,
          max(multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 2, StatusCode IN ('Ok', 'STATUS_CODE_OK'), 1, 0)) AS Status,
          min(Timestamp) AS Start
   FROM ${db}.${table}
   WHERE TraceId != ''
   GROUP BY TraceId
