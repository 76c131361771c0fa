-- Issue 24: evaluations other systems sent over OTLP (OpenTelemetry GenAI `gen_ai.evaluation.result`,
-- OpenInference annotations), handed over by the trace collector (AcceptEvaluations). Ratings with an
-- author kind, apart from the owners' own `ratings` (their key, rollups and change feed are untouched):
-- unique by (scope, target = the rated turn's trace id, name, identifier). Kept like ratings (no sweep).
CREATE TABLE evaluations (
    id            text        PRIMARY KEY,
    scope         smallint    NOT NULL,                 -- RatingScope (MESSAGE)
    target        text        NOT NULL,                 -- the rated turn's trace id, 32 lowercase hex
    name          text        NOT NULL,
    identifier    text        NOT NULL,
    author_kind   smallint    NOT NULL,                 -- AuthorKind: HUMAN | LLM | CODE
    convention    smallint    NOT NULL,                 -- EvaluationConvention
    conversation  text        NOT NULL,                 -- `instances/{instance}` of the turn
    turn_index    integer     NOT NULL,
    owner         text        NOT NULL,                 -- the conversation's owner
    message       text        NOT NULL DEFAULT '',      -- the turn's reply, `instances/{i}/messages/{m}`
    label         text        NOT NULL DEFAULT '',
    score         double precision,
    sentiment     smallint    NOT NULL DEFAULT 0,       -- RatingSentiment derived from label / score
    explanation   text        NOT NULL DEFAULT '',
    response_id   text        NOT NULL DEFAULT '',
    source        text        NOT NULL DEFAULT '',
    version       bigint      NOT NULL DEFAULT 1,
    create_time   timestamptz NOT NULL,
    update_time   timestamptz NOT NULL,
    CONSTRAINT evaluations_key UNIQUE (scope, target, name, identifier)
);
CREATE INDEX evaluations_turn ON evaluations (conversation, turn_index);
CREATE INDEX evaluations_update_time ON evaluations (update_time);
