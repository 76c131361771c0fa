-- Sharded layout only (clickhouse_cluster set), as 0009: Distributed tables over the attribute lookup
-- table (sharded by trace, as its rows' spans) and its coverage table.
CREATE TABLE IF NOT EXISTS ${db}.${dist}_attrs ${on_cluster} AS ${db}.${table}_attrs
ENGINE = Distributed(${cluster}, ${db}, ${table}_attrs, cityHash64(TraceId));
CREATE TABLE IF NOT EXISTS ${db}.${dist}_attrs_since ${on_cluster} AS ${db}.${table}_attrs_since
ENGINE = Distributed(${cluster}, ${db}, ${table}_attrs_since, rand())
