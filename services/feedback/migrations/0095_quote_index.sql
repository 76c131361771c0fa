-- The quoted reply's trigram index leaves the report's INSERT (issue 29; tests/bench/bench_floor_designs.py).
--
-- A report quotes the rated reply (~1,200 characters, ~900 trigrams). 0009's index on the reports
-- (feedback_owner_target_text_trgm) had the create's INSERT write those entries, and whichever insert
-- filled the index's pending list (about one create in 14) merged it inside its own statement, its WAL
-- flushed by that create's commit: that was the create's tail (the create's durable write alone, p99
-- 10.2-10.5 ms against 1.9-2.4 without the index; merging the list from another connection left it at
-- 7.3-9.5, since the next commit flushes that WAL too). Now the quotes are indexed behind the writes, in
-- an UNLOGGED side table: its index work writes no WAL, so no create's commit carries it (4.6 ms).
--
--   feedback_quotes          a report's quoted text as indexed (id, owner, quote), trigram index on (owner, quote);
--   feedback_quotes_pending  reports whose quote is not, or no longer, in feedback_quotes (logged: written by
--                            the trigger below in the writing transaction, emptied by the quote indexer);
--   feedback_quotes_built    one row while feedback_quotes holds every report that is not pending.
--
-- In every snapshot, a report with a quoted text is in feedback_quotes with that text, or in
-- feedback_quotes_pending, or feedback_quotes_built is empty. ListFeedback's text search tests each
-- report's own text and takes from these tables only the candidates (repository/reports.py
-- QUOTE_CANDIDATES), so it stays exact. A crash, or a standby promoted to primary, leaves the unlogged
-- tables empty: without the marker a search reads the owner's reports' own text (exact, slower) until
-- the quote indexer (services/feedback/quote_index.py) has rebuilt the side table.
CREATE UNLOGGED TABLE feedback_quotes (
    id    text PRIMARY KEY REFERENCES feedback (id) ON DELETE CASCADE,  -- a deleted report's text goes with it
    owner text NOT NULL,
    quote text NOT NULL
);
CREATE UNLOGGED TABLE feedback_quotes_built (built boolean PRIMARY KEY CHECK (built));
-- No foreign key: a pending row of a deleted report matches no report and is dropped by the next pass.
CREATE TABLE feedback_quotes_pending (
    owner text NOT NULL,
    id    text NOT NULL,
    PRIMARY KEY (owner, id)
);

CREATE FUNCTION feedback_quote_pending() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM feedback_quotes WHERE id = NEW.id;  -- the old text is no longer the report's
    END IF;
    IF coalesce(NEW.snapshot ->> 'target_text', '') <> '' THEN
        INSERT INTO feedback_quotes_pending (owner, id) VALUES (NEW.owner, NEW.id) ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER feedback_quote_pending AFTER INSERT ON feedback FOR EACH ROW
    WHEN (coalesce(NEW.snapshot ->> 'target_text', '') <> '') EXECUTE FUNCTION feedback_quote_pending();
CREATE TRIGGER feedback_quote_changed AFTER UPDATE OF snapshot ON feedback FOR EACH ROW
    WHEN (OLD.snapshot ->> 'target_text' IS DISTINCT FROM NEW.snapshot ->> 'target_text')
    EXECUTE FUNCTION feedback_quote_pending();

INSERT INTO feedback_quotes (id, owner, quote)
SELECT id, owner, snapshot ->> 'target_text' FROM feedback WHERE coalesce(snapshot ->> 'target_text', '') <> '';
-- Built after the fill (a bulk build); a small pending list, as 0009's: every search reads it.
CREATE INDEX feedback_quotes_owner_trgm ON feedback_quotes USING gin (owner, quote gin_trgm_ops)
    WITH (gin_pending_list_limit = 256);
INSERT INTO feedback_quotes_built VALUES (true);
DROP INDEX feedback_owner_target_text_trgm;
