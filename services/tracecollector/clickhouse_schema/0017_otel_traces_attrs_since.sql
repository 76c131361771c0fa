-- Ours: from which span start the attribute lookup table is complete (min(Since); none = not yet).
-- Rows stored before the view existed are not in it: create_schema records, once, 0 for an empty
-- otel_traces, else a time past every span then stored; searches whose window starts earlier scan
-- otel_traces (the backfill in docs/architecture.md "Spans on ClickHouse" lowers it).
CREATE TABLE IF NOT EXISTS ${db}.${table}_attrs_since ${on_cluster} (
    Since DateTime64(9),
    RecordedAt DateTime DEFAULT now()
) ENGINE = ${engine}
ORDER BY Since
