-- Ours, additive: every part of the span table also keeps its rows ordered by trace, so GetTrace
-- (WHERE TraceId = …) reads the granule(s) that hold one trace instead of one granule per
-- (ServiceName, SpanName) of it, and needs neither the lookup table's bounds nor partition pruning
-- (the projection's primary index finds the trace in each part). A projection is part of the table:
-- ClickHouse writes it with every INSERT, ours or an exporter's, and merges and drops it with its part.
-- Parts written before it exist have none (read through the TraceId bloom filter until the TTL drops
-- them; `ALTER TABLE … MATERIALIZE PROJECTION agentfeedback_by_trace` builds it for them at once).
-- Sharded: on each shard's local table (ON CLUSTER), which the Distributed table's reads use.
ALTER TABLE ${db}.${table} ${on_cluster} ADD PROJECTION IF NOT EXISTS agentfeedback_by_trace (SELECT * ORDER BY (TraceId, Timestamp))
