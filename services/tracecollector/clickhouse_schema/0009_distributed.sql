-- Sharded layout only (clickhouse_cluster set): Distributed tables over the replicated local ones,
-- as the exporter's README asks for clusters (the exporter writes ${table}; each shard stores its part
-- in ${table}_local). Spans are sharded by trace (cityHash64(TraceId)), so one trace lives on one shard.
CREATE TABLE IF NOT EXISTS ${db}.${dist} ${on_cluster} AS ${db}.${table}
ENGINE = Distributed(${cluster}, ${db}, ${table}, cityHash64(TraceId));
CREATE TABLE IF NOT EXISTS ${db}.${dist}_trace_id_ts ${on_cluster} AS ${db}.${table}_trace_id_ts
ENGINE = Distributed(${cluster}, ${db}, ${table}_trace_id_ts, cityHash64(TraceId));
CREATE TABLE IF NOT EXISTS ${db}.${dist}_dropped_days ${on_cluster} AS ${db}.${table}_dropped_days
ENGINE = Distributed(${cluster}, ${db}, ${table}_dropped_days, rand())
