-- Issue 24: evaluations recognised in accepted OTLP spans (services/tracecollector/evaluations.py),
-- kept until the feedback service has taken them (AcceptEvaluations): written before the Export is
-- acknowledged, delivered by a worker with retries and backoff (evaluation_outbox.py). One row per
-- feedback idempotency key (scope, target trace, name, identifier): a repeat with a new payload
-- replaces the pending one (version + 1, due at once). Rows whose turn is still unknown stay, retried,
-- for `evaluations_pending_days` after they were first received, then are dropped (and counted).
CREATE TABLE evaluation_outbox (
    key           text        PRIMARY KEY,             -- sha256 hex of the idempotency key
    payload       bytea       NOT NULL,                -- agentfeedback.feedback.v1.Evaluation
    version       bigint      NOT NULL DEFAULT 1,
    receive_time  timestamptz NOT NULL DEFAULT now(),
    update_time   timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    next_attempt  timestamptz NOT NULL DEFAULT now(),
    lease_until   timestamptz,
    last_outcome  text        NOT NULL DEFAULT ''      -- ACCEPTED never stays; PENDING_TURN, UNAVAILABLE, …
);
CREATE INDEX evaluation_outbox_due ON evaluation_outbox (next_attempt);
CREATE INDEX evaluation_outbox_received ON evaluation_outbox (receive_time);
