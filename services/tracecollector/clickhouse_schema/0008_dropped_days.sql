-- Ours: the UTC days whose partitions a retention pass dropped (GetTrace's TRACE_EXPIRED for a
-- time hint on such a day, as traces.dropped_days on PostgreSQL). TTL expiry between passes is not
-- recorded here: a hint before the retained window already answers TRACE_EXPIRED.
CREATE TABLE IF NOT EXISTS ${db}.${table}_dropped_days ${on_cluster} (
    Day Date,
    DroppedAt DateTime DEFAULT now()
) ENGINE = ${engine}
ORDER BY Day
