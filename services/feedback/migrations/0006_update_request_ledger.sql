-- UpdateFeedback request ids outlive the next update (AIP-155): one row per (owner, request_id), kept
-- DELETE_RECORD_RETENTION_S (24 h) like delete records, pruned per owner on that owner's next update
-- with a request id. Before this, only the row's last update request id was remembered, so retrying an
-- update after a later one re-ran it (ABORTED on its stale etag, or FAILED_PRECONDITION on the status
-- transition) instead of answering like the first time, and a no-op update recorded nothing.
CREATE TABLE feedback_update_requests (
    owner                text        NOT NULL,
    request_id           uuid        NOT NULL,
    feedback_id          text        NOT NULL,
    -- services.feedback.servicer._update_fingerprint of the request (its etag left out).
    request_fingerprint  bytea,
    create_time          timestamptz NOT NULL,
    PRIMARY KEY (owner, request_id)
);
INSERT INTO feedback_update_requests (owner, request_id, feedback_id, request_fingerprint, create_time)
SELECT owner, last_update_request_id, id, last_update_fingerprint, update_time
FROM feedback WHERE last_update_request_id IS NOT NULL
ON CONFLICT DO NOTHING;
