-- The change feed's outbox (issue 24; services/feedback/feed.py, repository/feed.py): one row per change
-- to a report or a rating, written by triggers in the changing statement's own transaction, so a
-- committed change always has its event and a rolled-back one never does, whichever code path wrote it.
--
-- Position = (xid, seq): `xid` the writing transaction's top-level id (pg_current_xact_id()), `seq` the
-- order inside it. A reader only returns events with xid < the xmin of its statement's snapshot: every
-- transaction below xmin has ended (committed and visible, or aborted and invisible), and every
-- transaction that has not ended yet, or starts later, has xid >= that xmin. So a reader that has passed
-- a position never later meets an event before it (no event skipped), and sees no uncommitted change.
-- An event carries the resource's id, not a copy: WatchFeedback reads the resource as it is now.
-- No NOTIFY here: PostgreSQL serializes the commits of notifying transactions (measured: 8 concurrent
-- writers lost a third of their throughput), so the service sends `NOTIFY feedback_feed` after its
-- writes commit, coalesced (services/feedback/feed_wakeups.py).
CREATE TABLE feed_events (
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    xid          bigint      NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
    -- 1 report (`feedback/{id}`), 2 rating (`ratings/{id}`).
    kind         smallint    NOT NULL,
    -- 1 created, 2 updated, 3 deleted, 4 filed (status became FILED).
    action       smallint    NOT NULL,
    resource_id  text        NOT NULL,
    owner        text        NOT NULL,
    -- Ratings: scope and aspect (admin filters); 0 / '' for reports.
    scope        smallint    NOT NULL DEFAULT 0,
    aspect       text        NOT NULL DEFAULT '',
    -- A rating written as a branch copy (CopyRatings onto a fork), not an opinion.
    branch_copy  boolean     NOT NULL DEFAULT false,
    change_time  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (xid, seq)
);
CREATE INDEX feed_events_owner ON feed_events (owner, xid, seq);
CREATE INDEX feed_events_time ON feed_events (change_time);

-- How far retention has deleted: a resume token at or before this position has lost events.
CREATE TABLE feed_pruned (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    xid      bigint      NOT NULL,
    seq      bigint      NOT NULL,
    time     timestamptz NOT NULL
);
INSERT INTO feed_pruned VALUES (true, 0, 0, now());

CREATE FUNCTION feed_report_event() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO feed_events (kind, action, resource_id, owner) VALUES (1, 3, OLD.id, OLD.owner);
    ELSE
        INSERT INTO feed_events (kind, action, resource_id, owner) VALUES (1,
            CASE WHEN TG_OP = 'INSERT' THEN 1 WHEN NEW.status = 3 AND OLD.status <> 3 THEN 4 ELSE 2 END,
            NEW.id, NEW.owner);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION feed_rating_event() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO feed_events (kind, action, resource_id, owner, scope, aspect, branch_copy)
        VALUES (2, 3, OLD.id, OLD.owner, OLD.scope, OLD.aspect, OLD.origin = 2);
    ELSE
        INSERT INTO feed_events (kind, action, resource_id, owner, scope, aspect, branch_copy)
        VALUES (2, CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE 2 END, NEW.id, NEW.owner, NEW.scope, NEW.aspect,
                NEW.origin = 2);
    END IF;
    RETURN NULL;
END $$;

-- What a reader of a report sees changes (not the capture worker's leases and marks).
CREATE TRIGGER feedback_feed AFTER INSERT OR DELETE ON feedback FOR EACH ROW EXECUTE FUNCTION feed_report_event();
CREATE TRIGGER feedback_feed_change AFTER UPDATE OF status, issue_url, snapshot, snapshot_source,
    trace_id, trace_state, trace_snapshot, version ON feedback FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.issue_url IS DISTINCT FROM NEW.issue_url
          OR OLD.snapshot_source IS DISTINCT FROM NEW.snapshot_source OR OLD.trace_id IS DISTINCT FROM NEW.trace_id
          OR OLD.trace_state IS DISTINCT FROM NEW.trace_state OR OLD.version IS DISTINCT FROM NEW.version
          OR OLD.snapshot IS DISTINCT FROM NEW.snapshot OR OLD.trace_snapshot IS DISTINCT FROM NEW.trace_snapshot)
    EXECUTE FUNCTION feed_report_event();

-- A rating changes when its version does (a no-op put keeps it) or it stops being a branch copy.
CREATE TRIGGER ratings_feed AFTER INSERT OR DELETE ON ratings FOR EACH ROW EXECUTE FUNCTION feed_rating_event();
CREATE TRIGGER ratings_feed_change AFTER UPDATE ON ratings FOR EACH ROW
    WHEN (OLD.version IS DISTINCT FROM NEW.version OR OLD.origin IS DISTINCT FROM NEW.origin
          OR OLD.message IS DISTINCT FROM NEW.message)
    EXECUTE FUNCTION feed_rating_event();
