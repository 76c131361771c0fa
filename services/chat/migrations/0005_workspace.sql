-- Issue 23: the co-construction workspace (objective, plan, artifacts, preferences).
-- One snapshot per turn, written in the reply's transaction, keyed like ratings (conversation,
-- turn_index); artifact contents live once per version and snapshots point at (id, version).

-- Next artifact id to hand out (ids ≥ 1, per conversation); monotonic like next_turn_index, never reset
-- (not by ClearMessages or DeleteTurn), so an artifact_id held elsewhere (ratings) never names another.
ALTER TABLE instances ADD COLUMN next_artifact_id bigint NOT NULL DEFAULT 1;

CREATE TABLE workspace_snapshots (
    owner             text        NOT NULL,
    instance_id       text        NOT NULL,
    turn_index        integer     NOT NULL,
    trace_id          text        NOT NULL,
    create_time       timestamptz NOT NULL,
    objective         text        NOT NULL DEFAULT '',
    objective_turn    integer     NOT NULL DEFAULT -1,
    plan              jsonb       NOT NULL DEFAULT '[]',  -- [{text, state}]
    preferences       jsonb       NOT NULL DEFAULT '[]',  -- [{text, source, turn}]
    artifacts         jsonb       NOT NULL DEFAULT '[]',  -- [{id, v, title, media_type}] by id
    -- What this turn changed against the previous snapshot (diffed when stored): component names
    -- (objective, plan, artifact, preferences) and the artifact ids written.
    changed           text[]      NOT NULL DEFAULT '{}',
    changed_artifacts bigint[]    NOT NULL DEFAULT '{}',
    PRIMARY KEY (owner, instance_id, turn_index),
    FOREIGN KEY (owner, instance_id) REFERENCES instances (owner, id) ON DELETE CASCADE
);

CREATE TABLE artifact_versions (
    owner        text        NOT NULL,
    instance_id  text        NOT NULL,
    artifact_id  bigint      NOT NULL,
    version      integer     NOT NULL,
    turn_index   integer     NOT NULL,
    title        text        NOT NULL,
    media_type   text        NOT NULL,
    content      text        NOT NULL,
    create_time  timestamptz NOT NULL,
    PRIMARY KEY (owner, instance_id, artifact_id, version),
    FOREIGN KEY (owner, instance_id) REFERENCES instances (owner, id) ON DELETE CASCADE
);
CREATE INDEX artifact_versions_turn ON artifact_versions (owner, instance_id, turn_index, artifact_id);
