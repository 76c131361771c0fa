-- What of a span was not stored, counted (OTLP Span.dropped_attributes_count, dropped_events_count,
-- dropped_links_count): the sender SDK's own counts plus what the collector's limits dropped
-- (limits.py: attributes past 128, events past 128, links past 128 per span). Before this the counts
-- reached the forwarded copy only, so GetTrace showed a cut span as if it were whole. An event's or
-- link's own count is a key of its object in `events` / `links` (ingest.py), no column.
--
-- integer, not smallint: an SDK may count far past 32767 dropped events of a long-lived span (OTLP
-- uint32; beyond 2^31 - 1 the value is clamped at ingest). NOT NULL DEFAULT 0: a constant default is
-- catalogue-only (PostgreSQL 11+: no rewrite of any day's partition), and rows stored before read 0,
-- which is what they were shown as. New partitions get the columns from `LIKE traces.spans`.
ALTER TABLE spans
    ADD COLUMN IF NOT EXISTS dropped_attributes_count integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS dropped_events_count     integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS dropped_links_count      integer NOT NULL DEFAULT 0;
