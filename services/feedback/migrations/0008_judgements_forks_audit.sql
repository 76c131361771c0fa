-- Issue 13: what a judgement can hold, forks' rating copies, the complaint's own turn, the audit trail.

-- Ratings: a set of reason slugs (sorted, distinct, ≤ 16) and one choice slug ('' = none).
ALTER TABLE ratings ADD COLUMN reasons text[] NOT NULL DEFAULT '{}';
ALTER TABLE ratings ADD COLUMN choice text NOT NULL DEFAULT '';
-- The recent feed's reason / choice filters and the funnel's reads of USER ratings by aspect.
CREATE INDEX ratings_reasons ON ratings USING gin (reasons) WHERE origin = 1;
CREATE INDEX ratings_user_aspect_time ON ratings (aspect, update_time) WHERE origin = 1;

-- AGENT reports: the trace id of the turn in which the owner spoke the complaint ('' otherwise).
ALTER TABLE feedback ADD COLUMN context_trace_id text NOT NULL DEFAULT '';

-- CopyRatings request ids (ForkConversation derives one per fork): a retried copy writes nothing,
-- even after the copies were edited or deleted. Kept 24 h like every request ledger.
CREATE TABLE copy_requests (
    owner        text        NOT NULL,
    request_id   uuid        NOT NULL,
    create_time  timestamptz NOT NULL,
    PRIMARY KEY (owner, request_id)
);
CREATE INDEX copy_requests_time ON copy_requests (create_time);

-- The audit trail (never pruned, like feedback): who did what to which report, never its body.
-- action: agentfeedback.feedback.v1.AuditAction; changes: [{field, old_value, new_value}] of status /
-- issue_url only.
CREATE TABLE audit_records (
    id           text        PRIMARY KEY,
    actor        text        NOT NULL,
    time         timestamptz NOT NULL,
    action       smallint    NOT NULL,
    feedback_id  text        NOT NULL,
    owner        text        NOT NULL,
    changes      jsonb       NOT NULL DEFAULT '[]'::jsonb,
    method       text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_records_time ON audit_records (time DESC, id DESC);
CREATE INDEX audit_records_owner_time ON audit_records (owner, time DESC, id DESC);
CREATE INDEX audit_records_feedback ON audit_records (feedback_id, time DESC, id DESC);
