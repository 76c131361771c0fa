-- Sharded layout only (clickhouse_cluster set), as 0009 / 0018: Distributed tables over the trace
-- summaries (sharded by trace, as their spans) and their coverage table.
CREATE TABLE IF NOT EXISTS ${db}.${dist}_summary ${on_cluster} AS ${db}.${table}_summary
ENGINE = Distributed(${cluster}, ${db}, ${table}_summary, cityHash64(TraceId));
CREATE TABLE IF NOT EXISTS ${db}.${dist}_summary_since ${on_cluster} AS ${db}.${table}_summary_since
ENGINE = Distributed(${cluster}, ${db}, ${table}_summary_since, rand())
