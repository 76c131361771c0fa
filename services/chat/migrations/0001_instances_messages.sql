-- Chat gateway schema: instances (a user's agents), their messages, and one row per turn
-- (request_id idempotency + the turn's outcome). Times are timestamptz in UTC.

CREATE TABLE instances (
    owner            text        NOT NULL,
    id               text        NOT NULL,
    display_name     text        NOT NULL,
    agent            text        NOT NULL,
    request_id       uuid,
    create_time      timestamptz NOT NULL,
    -- Next turn index to hand out; monotonic, never reset (not even by ClearMessages), so a
    -- (conversation, turn_index) key held elsewhere (ratings) never points at a different turn.
    next_turn_index  integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, id)
);
CREATE UNIQUE INDEX instances_request_id ON instances (owner, request_id) WHERE request_id IS NOT NULL;
CREATE INDEX instances_page ON instances (owner, create_time, id);

CREATE TABLE messages (
    owner        text        NOT NULL,
    instance_id  text        NOT NULL,
    id           text        NOT NULL,
    role         smallint    NOT NULL,   -- agentfeedback.chat.v1.Role
    content      text        NOT NULL,
    trace_id     text        NOT NULL,   -- 32 lowercase hex
    turn_index   integer     NOT NULL,
    create_time  timestamptz NOT NULL,
    channel      smallint    NOT NULL DEFAULT 0,
    audio_key    text        NOT NULL DEFAULT '',
    dictation    text        NOT NULL DEFAULT '',
    model        text        NOT NULL DEFAULT '',
    agent        text        NOT NULL DEFAULT '',
    PRIMARY KEY (owner, instance_id, id),
    FOREIGN KEY (owner, instance_id) REFERENCES instances (owner, id) ON DELETE CASCADE
);
CREATE INDEX messages_page ON messages (owner, instance_id, create_time, id);
CREATE INDEX messages_trace ON messages (trace_id);

CREATE TABLE turns (
    owner              text        NOT NULL,
    instance_id        text        NOT NULL,
    trace_id           text        NOT NULL,
    request_id         uuid,
    turn_index         integer     NOT NULL,
    -- RUNNING → DONE | FAILED
    state              text        NOT NULL DEFAULT 'RUNNING',
    user_message_id    text        NOT NULL,
    reply_message_id   text,
    error_code         text,
    error_message      text,
    create_time        timestamptz NOT NULL,
    PRIMARY KEY (owner, instance_id, trace_id),
    FOREIGN KEY (owner, instance_id) REFERENCES instances (owner, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX turns_request_id ON turns (owner, instance_id, request_id) WHERE request_id IS NOT NULL;
