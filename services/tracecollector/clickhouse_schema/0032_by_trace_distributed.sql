-- Sharded layout only (clickhouse_cluster set), as 0009 / 0023 / 0028: Distributed tables over the trace
-- table (sharded by trace, as its spans) and its coverage table.
CREATE TABLE IF NOT EXISTS ${db}.${dist}_by_trace ${on_cluster} AS ${db}.${table}_by_trace
ENGINE = Distributed(${cluster}, ${db}, ${table}_by_trace, cityHash64(TraceId));
CREATE TABLE IF NOT EXISTS ${db}.${dist}_by_trace_since ${on_cluster} AS ${db}.${table}_by_trace_since
ENGINE = Distributed(${cluster}, ${db}, ${table}_by_trace_since, rand())
