-- Issue 13: forks (ChatService.ForkConversation) and suspected defects (ListSuspectedDefects).
-- A fork is a new instance of the same owner; its copied messages point at their source.
ALTER TABLE instances ADD COLUMN fork_source text NOT NULL DEFAULT '';      -- `instances/{id}` or ''
ALTER TABLE instances ADD COLUMN fork_turn_index integer NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN source_message text NOT NULL DEFAULT '';    -- `instances/{i}/messages/{m}` or ''
ALTER TABLE messages ADD COLUMN source_trace_id text NOT NULL DEFAULT '';   -- 32 lowercase hex or ''

-- What the platform caught in a turn (agentfeedback.chat.v1.DefectKind numbers, sorted, distinct) and
-- the tool calls involved; empty for a clean turn. Written when the turn ends (DONE or FAILED).
ALTER TABLE turns ADD COLUMN defects smallint[] NOT NULL DEFAULT '{}';
ALTER TABLE turns ADD COLUMN defect_tools text[] NOT NULL DEFAULT '{}';
CREATE INDEX turns_defects_instance ON turns (owner, instance_id, create_time DESC, trace_id DESC)
    WHERE defects <> '{}';
CREATE INDEX turns_defects_all ON turns (create_time DESC, trace_id DESC) WHERE defects <> '{}';
