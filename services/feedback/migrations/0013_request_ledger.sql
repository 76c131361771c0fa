-- One request ledger for every idempotent mutation of the feedback service (services/common/ledger.py):
-- UpdateFeedback, DeleteFeedback, PutRating and CopyRatings request ids, one prune policy (24 h).
-- The live records of the four per-method tables move here. Those tables are no longer written; they
-- stay until no replica of the previous version runs, and a later migration drops them.
CREATE TABLE request_ledger (
    owner text NOT NULL,
    method text NOT NULL,
    request_id uuid NOT NULL,
    resource text NOT NULL DEFAULT '',
    fingerprint bytea,
    create_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, method, request_id)
);
CREATE INDEX request_ledger_time ON request_ledger (create_time);

INSERT INTO request_ledger (owner, method, request_id, resource, fingerprint, create_time)
SELECT owner, 'UpdateFeedback', request_id, feedback_id, request_fingerprint, create_time FROM feedback_update_requests
ON CONFLICT DO NOTHING;
INSERT INTO request_ledger (owner, method, request_id, resource, fingerprint, create_time)
SELECT owner, 'DeleteFeedback', request_id, feedback_id, NULL, delete_time FROM deleted_feedback
ON CONFLICT DO NOTHING;
INSERT INTO request_ledger (owner, method, request_id, resource, fingerprint, create_time)
SELECT owner, 'PutRating', request_id, rating_id, request_fingerprint, create_time FROM rating_requests
ON CONFLICT DO NOTHING;
INSERT INTO request_ledger (owner, method, request_id, resource, fingerprint, create_time)
SELECT owner, 'CopyRatings', request_id, '', NULL, create_time FROM copy_requests
ON CONFLICT DO NOTHING;
