-- Ours: from which span start the trace summaries are complete (min(Since); none = not yet), recorded
-- as 0017's: 0 for an empty otel_traces, else past every span then stored. A trace whose root starts
-- earlier (or with no summary row) is summarized from otel_traces.
CREATE TABLE IF NOT EXISTS ${db}.${table}_summary_since ${on_cluster} (
    Since DateTime64(9),
    RecordedAt DateTime DEFAULT now()
) ENGINE = ${engine}
ORDER BY Since
