-- Turns removed from a conversation in chat (issue 25): ChatService.DeleteTurn (one turn) and
-- ClearMessages (every turn so far) tell the feedback service BEFORE they delete
-- (FeedbackService.NoteTurnsRemoved, services/feedback/repository/removed_turns.py). One row per
-- removal, a range of turn indexes (Clear chat is one row whatever the turn count); chat never reuses a
-- turn index, so a range never covers a later turn. The owner's ratings of those turns are deleted in
-- the same transaction (the rollup triggers of 0010/0012/0015/0016 decrement on delete, the change
-- feed's outbox trigger of 0030 emits the RATING delete events).
CREATE TABLE removed_turns (
    owner            text        NOT NULL,
    conversation     text        NOT NULL,
    first_turn_index integer     NOT NULL,
    last_turn_index  integer     NOT NULL,
    remove_time      timestamptz NOT NULL,
    PRIMARY KEY (owner, conversation, first_turn_index, last_turn_index)
);

-- A new rating on a removed turn is refused by the write itself (PutRating's upsert, CopyRatings),
-- SQLSTATE AF001; an update (compare-and-swap) finds no row, the removal deleted it (a racing update
-- holds the row, and the removal's DELETE waits for it). A put racing the removal cannot land after it: the removal holds this
-- conversation's advisory lock exclusively, a rating write takes it shared before looking, and the look
-- (a statement of a VOLATILE function: its own snapshot) sees a removal committed while it waited.
-- CONVERSATION-scope ratings (scope 6) name no turn and are never refused.
CREATE FUNCTION removed_turns_lock_key(who text, conv text) RETURNS bigint LANGUAGE sql IMMUTABLE
    AS $$ SELECT hashtextextended('removed_turns ' || who || ' ' || conv, 0) $$;

CREATE FUNCTION refuse_removed_turn() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.scope = 6 THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(removed_turns_lock_key(NEW.owner, NEW.conversation));
    IF EXISTS (SELECT 1 FROM removed_turns t WHERE t.owner = NEW.owner AND t.conversation = NEW.conversation
               AND NEW.turn_index BETWEEN t.first_turn_index AND t.last_turn_index) THEN
        RAISE EXCEPTION 'turn % of % was removed', NEW.turn_index, NEW.conversation USING ERRCODE = 'AF001';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER ratings_refuse_removed_turn BEFORE INSERT
    ON ratings FOR EACH ROW EXECUTE FUNCTION refuse_removed_turn();
