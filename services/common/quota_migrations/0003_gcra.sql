-- Per-owner write quota without window edges (services/common/quota.py, GCRA): one row per service
-- and owner holding its theoretical arrival time. `write_windows` stays for replicas of the previous
-- version during a rolling upgrade (they count in it; the two counts are apart until they are gone).
CREATE TABLE write_tat (
    -- The gRPC service counting (e.g. `agentfeedback.chat.v1.ChatService`).
    scope      text             NOT NULL,
    owner      text             NOT NULL,
    -- Theoretical arrival time, Unix seconds: the owner's next write is on time at `tat`; it may come
    -- early by up to the burst (burst × emission interval).
    tat        double precision NOT NULL,
    -- Tokens the last statement granted (RETURNING sees only the new row; the SET sees the old one).
    last_grant integer          NOT NULL,
    PRIMARY KEY (scope, owner)
);
