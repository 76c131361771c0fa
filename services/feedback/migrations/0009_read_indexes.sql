-- Reads that stay fast as the tables grow (issue 17; measured by tests/bench/bench_feedback_reads.py).
--
-- Text search (ListFeedback `text`, ListRecentFeedback `text`: case-insensitive substring, ILIKE) is
-- answered by trigram indexes (pg_trgm), never by a scan. The reports' index leads with `owner`
-- (btree_gin), so an owner's search reads only that owner's matches; the same index serves the admin
-- feed's search of every owner (a GIN index answers a condition on any of its columns).
-- Pending lists are kept small (256 kB): an insert that has to merge a full list pays for it inline,
-- and a 4 MB default list made periodic CreateFeedback / PutRating spikes.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;

CREATE INDEX feedback_owner_body_trgm ON feedback USING gin (owner, body gin_trgm_ops)
    WITH (gin_pending_list_limit = 256);
CREATE INDEX feedback_owner_target_text_trgm ON feedback USING gin (owner, (snapshot ->> 'target_text') gin_trgm_ops)
    WITH (gin_pending_list_limit = 256);
CREATE INDEX ratings_note_trgm ON ratings USING gin (note gin_trgm_ops) WITH (gin_pending_list_limit = 256);

-- An owner's reports of one instance (ListFeedback `instance`, with or without `status`), newest first.
CREATE INDEX feedback_owner_instance_time ON feedback (owner, instance, create_time DESC, id DESC);
-- An instance belongs to one owner: without this the planner multiplies the two selectivities, takes
-- a heavy owner's instance for a handful of rows and sorts them all (bitmap scan) instead of walking
-- the index above newest first.
CREATE STATISTICS feedback_owner_instance_stats (dependencies, ndistinct) ON owner, instance FROM feedback;
