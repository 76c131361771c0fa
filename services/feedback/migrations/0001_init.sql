-- Feedback service schema (`feedback`): durable reports and editable ratings.
-- Enum columns hold the proto enum numbers of agentfeedback.feedback.v1 (0 = UNSPECIFIED).

CREATE TABLE feedback (
    id                  text PRIMARY KEY,
    owner               text NOT NULL,
    -- AIP-155: a retry with the same request id returns the first row (unique per owner).
    request_id          uuid NOT NULL,
    -- Target: exactly one of message / trace / coding (target_kind says which).
    target_kind         text NOT NULL CHECK (target_kind IN ('message', 'trace', 'coding')),
    message             text NOT NULL DEFAULT '',
    coding_session      text NOT NULL DEFAULT '',
    coding_seq          bigint NOT NULL DEFAULT 0,
    instance            text NOT NULL DEFAULT '',
    -- The turn's trace id (32 hex) once known ('' for coding targets without one).
    trace_id            text NOT NULL DEFAULT '',
    surface             smallint NOT NULL DEFAULT 0,
    author              smallint NOT NULL,
    -- The owner's words, exactly as given. Never updated.
    body                text NOT NULL,
    sentiment           smallint NOT NULL DEFAULT 0,
    category            smallint NOT NULL DEFAULT 0,
    -- Snapshot (proto JSON, field names as in the proto) and where it came from.
    snapshot            jsonb NOT NULL,
    snapshot_source     smallint NOT NULL,
    -- When the turn happened (target message time); drives EXPIRED.
    turn_time           timestamptz,
    -- Frozen spans: state (TraceSnapshotState), the frozen copy, the capture worker's bookkeeping.
    trace_state         smallint NOT NULL DEFAULT 0,
    trace_snapshot      jsonb NOT NULL DEFAULT '{}'::jsonb,
    capture_attempts    integer NOT NULL DEFAULT 0,
    capture_span_count  integer NOT NULL DEFAULT -1,
    next_capture_at     timestamptz,
    capture_time        timestamptz,
    -- Client snapshot (source 2) waiting for the authoritative one: when the worker looks again.
    refresh_at          timestamptz,
    -- Triage.
    status              smallint NOT NULL DEFAULT 1,
    issue_url           text NOT NULL DEFAULT '',
    -- FileFeedback claim: a filer holds it while talking to the tracker (idempotent filing).
    filing_until        timestamptz,
    -- AIP-155 for UpdateFeedback: the request id of the last applied update (a retry returns the row).
    last_update_request_id uuid,
    version             bigint NOT NULL DEFAULT 1,
    create_time         timestamptz NOT NULL,
    update_time         timestamptz NOT NULL,
    CONSTRAINT feedback_owner_request UNIQUE (owner, request_id)
);

CREATE INDEX feedback_owner_time ON feedback (owner, create_time DESC, id DESC);
CREATE INDEX feedback_owner_trace ON feedback (owner, trace_id);
CREATE INDEX feedback_time ON feedback (create_time DESC, id DESC);
-- The capture worker's queue: only PENDING rows (trace_state = 1) are indexed.
CREATE INDEX feedback_capture_queue ON feedback (next_capture_at) WHERE trace_state = 1;
-- Client snapshots waiting for the authoritative one (snapshot_source = 2).
CREATE INDEX feedback_snapshot_refresh ON feedback (refresh_at) WHERE snapshot_source = 2;

CREATE TABLE ratings (
    id              text PRIMARY KEY,
    -- `instances/{instance}`.
    conversation    text NOT NULL,
    turn_index      integer NOT NULL,
    owner           text NOT NULL,
    scope           smallint NOT NULL,
    aspect          text NOT NULL,
    artifact_id     text NOT NULL DEFAULT '',
    sentiment       smallint NOT NULL DEFAULT 0,
    category        smallint NOT NULL DEFAULT 0,
    note            text NOT NULL DEFAULT '',
    origin          smallint NOT NULL,
    -- MESSAGE scope: the rated assistant message's name.
    message         text NOT NULL DEFAULT '',
    version         bigint NOT NULL DEFAULT 1,
    create_time     timestamptz NOT NULL,
    update_time     timestamptz NOT NULL,
    CONSTRAINT ratings_key UNIQUE (conversation, turn_index, owner, scope, aspect, artifact_id)
);

CREATE INDEX ratings_owner_conversation ON ratings (owner, conversation, turn_index);
CREATE INDEX ratings_time ON ratings (update_time DESC, id DESC);
