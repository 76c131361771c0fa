-- Per-owner write counters (services/common/quota.py): one row per service, owner and fixed window,
-- shared by every replica of the service. Rows older than the previous window are deleted by
-- the same statement that counts a write.
CREATE TABLE write_windows (
    -- The gRPC service counting (e.g. `agentfeedback.chat.v1.ChatService`).
    scope        text   NOT NULL,
    owner        text   NOT NULL,
    -- Window start, Unix seconds (a multiple of the window length).
    window_start bigint NOT NULL,
    used         integer NOT NULL,
    PRIMARY KEY (scope, owner, window_start)
);
