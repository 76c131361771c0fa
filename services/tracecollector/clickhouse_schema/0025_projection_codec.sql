-- Storage only, on the exporter's table: the codec of whatever in a part declares none, i.e. our
-- projection agentfeedback_by_trace (0010: ClickHouse 26.9 takes no CODEC on a projection's columns,
-- and its parts ignore the columns' CODEC, so they were LZ4, the server default) and the skip index
-- files. Every column of the exporter's schema and ours declares its CODEC, which wins: the rows,
-- names, types and meaning of otel_traces are untouched, and an exporter's INSERT is the same.
-- MODIFY SETTING only edits metadata: parts are read with the codec each was written with, new and
-- merged parts get ZSTD(3). bench_span_stores at 300k spans: projection 81.5 → 47.8 bytes per span.
ALTER TABLE ${db}.${table} ${on_cluster} MODIFY SETTING default_compression_codec = 'ZSTD(3)'
