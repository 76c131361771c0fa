-- The request ids of CreateFeedback become one ledger, the authority on "this request id was used":
-- a row per report, live (delete_time NULL) or deleted (delete_time set, kept 24 hours). The create
-- statement claims its request id here first (ON CONFLICT), and DeleteFeedback only stamps the row,
-- so a retry racing a delete can never slip in between the row going away and its record appearing
-- (0004 needed a second statement in a transaction on every create for that). No content: owner,
-- request id, report id, the request's SHA-256 fingerprint.
ALTER TABLE deleted_feedback_creates RENAME TO feedback_create_requests;
ALTER INDEX deleted_feedback_creates_pkey RENAME TO feedback_create_requests_pkey;
ALTER INDEX deleted_feedback_creates_time RENAME TO feedback_create_requests_deleted;
ALTER TABLE feedback_create_requests ALTER COLUMN delete_time DROP NOT NULL;
-- Every existing report claims its request id (a live row wins over an older deletion record).
INSERT INTO feedback_create_requests (owner, request_id, feedback_id, request_fingerprint, delete_time)
SELECT owner, request_id, id, request_fingerprint, NULL FROM feedback
ON CONFLICT (owner, request_id) DO UPDATE SET feedback_id = EXCLUDED.feedback_id,
    request_fingerprint = EXCLUDED.request_fingerprint, delete_time = NULL;
