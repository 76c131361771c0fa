-- Signed webhooks (issue 24; services/feedback/webhooks.py, repository/webhooks.py): subscriptions to the
-- change feed (feed_events, migration 0030), each with its own position, and the log of delivery attempts.
-- The secret is stored encrypted (Fernet, key from AGENTFEEDBACK_FEEDBACK_WEBHOOK_KEY): signing needs
-- the secret itself, so a hash would not do; a dump of this table does not reveal it.
CREATE TABLE webhook_subscriptions (
    id               text PRIMARY KEY,
    url              text        NOT NULL,
    secret_encrypted bytea       NOT NULL,
    owner_filter     text        NOT NULL DEFAULT '',
    kind             smallint    NOT NULL DEFAULT 0,
    scope            smallint    NOT NULL DEFAULT 0,
    aspect           text        NOT NULL DEFAULT '',
    -- 1 active, 2 dead-lettered.
    state            smallint    NOT NULL DEFAULT 1,
    -- Delivered through this feed position (the next event is the first after it).
    position_xid     bigint      NOT NULL,
    position_seq     bigint      NOT NULL,
    delivered_event  text        NOT NULL DEFAULT '',
    -- Failed attempts at the next event; when the next attempt is due.
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- A replica's delivery worker holds the subscription until then (one deliverer at a time: in order).
    lease_until      timestamptz,
    lease_token      uuid,
    creator          text        NOT NULL,
    request_id       uuid,
    create_time      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (creator, request_id)
);

CREATE TABLE webhook_deliveries (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription  text        NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    event_id      text        NOT NULL,
    attempt       integer     NOT NULL,
    -- 1 delivered, 2 failed (retried), 3 dead-lettered (the last attempt failed).
    outcome       smallint    NOT NULL,
    http_status   integer     NOT NULL DEFAULT 0,
    error         text        NOT NULL DEFAULT '',
    latency_ms    double precision NOT NULL,
    time          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_by_subscription ON webhook_deliveries (subscription, id DESC);
CREATE INDEX webhook_deliveries_time ON webhook_deliveries (time);
