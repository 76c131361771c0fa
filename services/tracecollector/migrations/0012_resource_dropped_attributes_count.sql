-- Attributes of a span's resource that were not stored, counted (OTLP Resource.dropped_attributes_count):
-- the sender's own count plus what the collector's resource byte limit dropped (limits.py: 64 KiB of
-- attributes per resource, the first ones kept). The resource is stored with every span, so its count
-- is too; GetTrace returns it as Span.resource_dropped_attributes_count, so a cut resource does not
-- read as whole.
--
-- integer NOT NULL DEFAULT 0, as 0011's counts: a constant default is catalogue-only (no rewrite of any
-- day's partition) and rows stored before read 0. New partitions get the column from `LIKE traces.spans`.
ALTER TABLE spans
    ADD COLUMN IF NOT EXISTS resource_dropped_attributes_count integer NOT NULL DEFAULT 0;
