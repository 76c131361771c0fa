-- Sharded layout only (clickhouse_cluster set), as 0009 / 0023 (over 0027): Distributed tables over the attribute
-- lookup table (sharded by trace, as its rows' spans) and its coverage table.
CREATE TABLE IF NOT EXISTS ${db}.${dist}_attrs_weekly ${on_cluster} AS ${db}.${table}_attrs_weekly
ENGINE = Distributed(${cluster}, ${db}, ${table}_attrs_weekly, cityHash64(TraceId));
CREATE TABLE IF NOT EXISTS ${db}.${dist}_attrs_weekly_since ${on_cluster} AS ${db}.${table}_attrs_weekly_since
ENGINE = Distributed(${cluster}, ${db}, ${table}_attrs_weekly_since, rand())
