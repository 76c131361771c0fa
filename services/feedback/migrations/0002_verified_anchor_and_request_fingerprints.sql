-- Client snapshots are verified before any span is frozen; request ids are bound to their request.

-- SHA-256 of the deterministic serialization of the CreateFeedbackRequest without its request_id
-- (NULL on rows created before this migration: a retry of those is accepted as before).
ALTER TABLE feedback ADD COLUMN request_fingerprint bytea;
-- The same for the last applied UpdateFeedbackRequest (pairs with last_update_request_id).
ALTER TABLE feedback ADD COLUMN last_update_fingerprint bytea;

-- Completed DeleteFeedback calls, so a retry with the same request id answers OK instead of NOT_FOUND.
-- Holds no content (owner, request id, the deleted id). Retention: 24 hours (the delete path prunes
-- older records of the same owner); a retry later than that gets NOT_FOUND.
CREATE TABLE deleted_feedback (
    owner           text NOT NULL,
    request_id      uuid NOT NULL,
    feedback_id     text NOT NULL,
    delete_time     timestamptz NOT NULL,
    PRIMARY KEY (owner, request_id)
);
CREATE INDEX deleted_feedback_time ON deleted_feedback (delete_time);
