-- Reports and removed turns (issue 25). The chat service now tells this service from its outbox, after
-- its own delete has committed (FeedbackService.NoteTurnsRemoved), so a removal can arrive after later
-- turns of the conversation exist: a report is matched to a removal by the turn index its snapshot
-- names (`snapshot->>'turn_index'`, written by repository/rows.py), not by "every report of the
-- conversation". A report whose snapshot came from nowhere (source NONE = 3: chat was unreachable)
-- names no turn (NULL): only the removal's trace ids mark it.
CREATE FUNCTION report_turn_index(snapshot jsonb, source smallint) RETURNS integer LANGUAGE sql IMMUTABLE
    AS $$ SELECT CASE WHEN source IN (1, 2) THEN (snapshot->>'turn_index')::integer END $$;

-- A report stored on a turn already removed (its CreateFeedback read the turn from chat just before the
-- delete) is marked as it is stored, with the removal's time, so it is never counted. Like the ratings'
-- refusal of 0065: the conversation's removal lock taken shared first (a removal holds it exclusively
-- and waits for nothing an insert holds), then a look of its own (a VOLATILE function's statement sees
-- a removal committed while it waited).
CREATE FUNCTION mark_removed_turn_report() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.instance = '' OR NEW.turn_removed_time IS NOT NULL THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(removed_turns_lock_key(NEW.owner, NEW.instance));
    NEW.turn_removed_time := (
        SELECT min(t.remove_time) FROM removed_turns t WHERE t.owner = NEW.owner AND t.conversation = NEW.instance
        AND report_turn_index(NEW.snapshot, NEW.snapshot_source) BETWEEN t.first_turn_index AND t.last_turn_index);
    RETURN NEW;
END $$;

CREATE TRIGGER feedback_mark_removed_turn BEFORE INSERT
    ON feedback FOR EACH ROW EXECUTE FUNCTION mark_removed_turn_report();
