-- Sharded layout only (clickhouse_cluster set), as 0009 / 0023 (over 0027): Distributed tables over the attribute
-- lookup table (sharded by trace, as its rows' spans) and its coverage table.
CREATE TABLE IF NOT EXISTS ${db}.${dist}_attrs_weekly ${on_cluster} AS ${db}.${table}_attrs_weekly
ENGINE = Distributed(${cluster}, ${db}, ${table}_attrs_weekly, cityHash64(TraceId));
CREATE TABLE IF NOT EXISTS ${db}.${dist}_attrs_weekly_since ${on_cluster} AS ${db}.${table}_attrs_weekly_since
ENGINE = Distributed(${cluster}, ${db}, ${table}_attrs_weekly_since, rand())
;
-- The summaries' Distributed table gets 0029's column (a Distributed table does not check its shards'
-- columns when altered; 0029 adds it to them right after).
ALTER TABLE ${db}.${dist}_summary ${on_cluster}
ADD COLUMN IF NOT EXISTS Start SimpleAggregateFunction(min, DateTime64(9)) DEFAULT toDateTime64(0, 9)
