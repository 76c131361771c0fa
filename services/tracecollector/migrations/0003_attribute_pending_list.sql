-- The attribute index's GIN pending list kept small (issue 17): gin_pending_list_limit = 64 kB
-- (PostgreSQL's minimum; default 4 MB) on every day's `spans_attributes_idx` partition.
--
-- Why: with fastupdate (on, the default) new entries go to an unsorted pending list that every
-- attribute search reads in full, on every probe of that partition; a 4 MB list made one probe of
-- today's partition cost 10-15 ms (the 14-day rare-value search probes it several times), and
-- whether it was there depended on whether autovacuum had just merged it. At 64 kB a probe reads at
-- most 8 pages. Insert cost measured equal (INSERT of 100k bench spans: 1,264 ms with 4 MB, 1,273 ms
-- with 64 kB; fastupdate = off: 4,112 ms, which is why the list stays on).
--
-- A partitioned index takes no storage options (PostgreSQL: "ALTER action SET cannot be performed on
-- relation ... partitioned indexes"), so new partitions get theirs from the retention pass
-- (repository.CREATE_ATTRIBUTE_INDEX, made on the empty table before ATTACH adopts it) and the
-- partitions that exist already are set here (a catalogue change; SHARE UPDATE EXCLUSIVE on each index,
-- which COPY does not wait for).
DO $$
DECLARE idx regclass;
BEGIN
  FOR idx IN SELECT i.inhrelid::regclass FROM pg_inherits i
             WHERE i.inhparent = 'traces.spans_attributes_idx'::regclass LOOP
    EXECUTE format('ALTER INDEX %s SET (gin_pending_list_limit = 64)', idx);
  END LOOP;
END $$;
