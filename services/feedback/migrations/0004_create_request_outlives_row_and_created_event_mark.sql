-- A create's request id outlives its row; the `feedback.created` span event is emitted once per row.

-- Reports deleted by DeleteFeedback, by the request id that CREATED them, so a late retry of that
-- CreateFeedback writes nothing (NOT_FOUND, reason FEEDBACK_DELETED) instead of a second row. Holds no
-- content: owner, the create's request id, the deleted id, and the create's request fingerprint
-- (SHA-256, to tell a retry from a different request). Retention: 24 hours, like `deleted_feedback`
-- (the delete path prunes older records of the same owner); a retry later than that creates a new row.
CREATE TABLE deleted_feedback_creates (
    owner               text NOT NULL,
    request_id          uuid NOT NULL,
    feedback_id         text NOT NULL,
    request_fingerprint bytea,
    delete_time         timestamptz NOT NULL,
    PRIMARY KEY (owner, request_id)
);
CREATE INDEX deleted_feedback_creates_time ON deleted_feedback_creates (owner, delete_time);

-- When the row's `feedback.created` span event was emitted (NULL: not yet). Set in the same statement
-- that makes the row's trace id authoritative (the insert for a chat-service snapshot, the verification
-- for a CLIENT one), so the event goes out at most once whatever restarts or retries happen.
ALTER TABLE feedback ADD COLUMN created_event_time timestamptz;
-- Rows stored before this migration: a chat-service snapshot got its event at create time, and a CLIENT
-- snapshot already verified cannot be told apart from one (source 1 too): both count as emitted. Rows
-- still waiting for verification (source 2) get theirs once verified.
UPDATE feedback SET created_event_time = create_time WHERE snapshot_source <> 2 AND trace_id <> '';
