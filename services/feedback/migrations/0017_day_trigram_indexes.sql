-- Text searches of the admin feed that stay flat (issue 17; repository/text_search.py, step 2 "the
-- last days"). The trigram indexes of 0009 give every match of a term across all owners (≈ 5,000
-- reports and 5,000 ratings for a term in 1 row of 200 at 1M reports), and each match costs a heap
-- visit to recheck it and learn its time (≈ 22 ms a table, EXPLAIN ANALYZE). These indexes key each
-- trigram by the row's UTC day (`20423:che`), so "the rows of day D holding every trigram of the term"
-- reads only day D's posting lists (≈ 0.06 ms a day) and visits only those rows.
-- (A btree_gin (day, trigrams) index does not do this: its day range is a partial match that
-- collects every row of the days first, 10–13 ms at 1M.)
--
-- day_trigrams(t, s): `{day}:{trigram}` for each trigram pg_trgm's show_trgm gives of `s`, day = whole
-- UTC days since 1970-01-01 of `t` ('' gives the single entry `{day}:`, which no search asks for). One
-- SQL expression (PostgreSQL inlines it: no function call per row); show_trgm is named with the schema
-- pg_trgm lives in, since maintenance commands run with an empty search_path.
DO $$
BEGIN
    EXECUTE format($f$
CREATE FUNCTION day_trigrams(t timestamptz, s text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $b$
SELECT pg_catalog.string_to_array(((t AT TIME ZONE 'UTC')::date - DATE '1970-01-01')::text || ':'
    || pg_catalog.array_to_string(%1$I.show_trgm(s), '|' || ((t AT TIME ZONE 'UTC')::date - DATE '1970-01-01')::text || ':'),
    '|')
$b$
$f$, (SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'));
END
$$;

CREATE INDEX feedback_body_day_trgm ON feedback USING gin (day_trigrams(create_time, body))
    WITH (gin_pending_list_limit = 256);
-- Ratings: only users' ratings with a note (the feed's rows a text can match).
CREATE INDEX ratings_note_day_trgm ON ratings USING gin (day_trigrams(update_time, note))
    WITH (gin_pending_list_limit = 256) WHERE origin = 1 AND note <> '';
-- Those ratings' count (the planner's row count of this index sizes a search's days) and oldest time.
CREATE INDEX ratings_note_time ON ratings (update_time) WHERE origin = 1 AND note <> '';
