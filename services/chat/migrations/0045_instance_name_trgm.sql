-- The Agents list's search by name (ListInstances `search`: a case-insensitive substring, ILIKE) from a
-- trigram index (pg_trgm), so a name that few or none of an owner's 100k instances hold is found
-- without walking them all (measured by tests/bench/bench_instances.py). A common text still walks
-- instances_activity and stops at the page: the planner chooses by the pattern's selectivity.
-- pg_trgm is installed once per database, in the schema of whichever service got there first: feedback
-- (migration 0009, search path `feedback, public`) or, when chat is first, `public` (never `chat`,
-- where feedback's unqualified gin_trgm_ops would not resolve). Its operator class is named with the
-- schema it is in; the index then depends on the extension, not on feedback's tables.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE EXTENSION pg_trgm SCHEMA public;
    END IF;
    EXECUTE format('CREATE INDEX instances_name_trgm ON instances USING gin (display_name %I.gin_trgm_ops)',
                   (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                    WHERE e.extname = 'pg_trgm'));
END
$$;
