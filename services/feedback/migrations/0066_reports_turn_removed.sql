-- Reports of a removed turn (issue 25): kept (evidence, with their frozen copy of the turn), marked with
-- when the turn was removed (FeedbackService.NoteTurnsRemoved, the same transaction as the ratings'
-- delete of 0065) and no longer counted by GetFeedbackStats (report_hour_counts here, the partial hour
-- in repository/ratings.py _REPORT_COUNTS): a marked row is -1 on its hour, as a delete is.
ALTER TABLE feedback ADD COLUMN turn_removed_time timestamptz;

CREATE FUNCTION add_report_count(h timestamptz, cat smallint, delta integer) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO report_hour_counts AS c VALUES (date_trunc('hour', h, 'UTC'), cat, pg_backend_pid() % 16, delta)
    ON CONFLICT (hour, category, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
$$;

CREATE OR REPLACE FUNCTION count_report() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    old_on boolean := TG_OP <> 'INSERT' AND OLD.turn_removed_time IS NULL;
    new_on boolean := TG_OP <> 'DELETE' AND NEW.turn_removed_time IS NULL;
BEGIN
    IF old_on AND new_on AND OLD.category = NEW.category AND OLD.create_time = NEW.create_time THEN
        RETURN NULL;
    END IF;
    IF old_on THEN
        PERFORM add_report_count(OLD.create_time, OLD.category, -1);
    END IF;
    IF new_on THEN
        PERFORM add_report_count(NEW.create_time, NEW.category, 1);
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER feedback_hour_counts ON feedback;
CREATE TRIGGER feedback_hour_counts AFTER INSERT OR DELETE OR UPDATE OF category, create_time, turn_removed_time
    ON feedback FOR EACH ROW EXECUTE FUNCTION count_report();

-- A change feed UPDATE event when a report is marked (readers of the report see the new field).
DROP TRIGGER feedback_feed_change ON feedback;
CREATE TRIGGER feedback_feed_change AFTER UPDATE OF status, issue_url, snapshot, snapshot_source,
    trace_id, trace_state, trace_snapshot, version, turn_removed_time ON feedback FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.issue_url IS DISTINCT FROM NEW.issue_url
          OR OLD.snapshot_source IS DISTINCT FROM NEW.snapshot_source OR OLD.trace_id IS DISTINCT FROM NEW.trace_id
          OR OLD.trace_state IS DISTINCT FROM NEW.trace_state OR OLD.version IS DISTINCT FROM NEW.version
          OR OLD.snapshot IS DISTINCT FROM NEW.snapshot OR OLD.trace_snapshot IS DISTINCT FROM NEW.trace_snapshot
          OR OLD.turn_removed_time IS DISTINCT FROM NEW.turn_removed_time)
    EXECUTE FUNCTION feed_report_event();
