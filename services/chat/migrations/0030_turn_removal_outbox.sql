-- The turn removal outbox (issue 25). DeleteTurn and ClearMessages insert one row in the same transaction
-- as their delete; services/chat/removal.py sends it to the feedback service
-- (FeedbackService.NoteTurnsRemoved, idempotent) at once and deletes it when acknowledged; a row left
-- (the process killed in between, the feedback service down) is sent again by the relay every replica
-- runs, until acknowledged. So after a kill at any point either nothing was deleted and nothing told, or
-- the delete is durable here and the feedback service will be told.
CREATE TABLE turn_removals (
    id                 bigserial   PRIMARY KEY,
    owner              text        NOT NULL,
    instance_id        text        NOT NULL,
    -- DeleteTurn: the removed turn's indexes and trace id; ClearMessages: every turn ≤ through_turn_index.
    turn_indexes       integer[]   NOT NULL DEFAULT '{}',
    through_turn_index integer,
    trace_ids          text[]      NOT NULL DEFAULT '{}',
    create_time        timestamptz NOT NULL DEFAULT now(),
    -- Sends so far; the next one is due at next_attempt (a claim moves it out: the claim's lease).
    attempts           integer     NOT NULL DEFAULT 0,
    next_attempt       timestamptz NOT NULL,
    last_error         text        NOT NULL DEFAULT ''
);
CREATE INDEX turn_removals_due ON turn_removals (next_attempt);
