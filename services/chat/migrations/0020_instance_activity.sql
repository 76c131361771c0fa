-- The Agents list (issue 28): latest activity, turn counts and search by name, fast at 100k instances.
-- last_turn_time: the start of the latest turn (set in the turn's first statement, BEGIN_TURN);
-- activity_time orders "latest activity first" (an instance without a turn counts from its creation).
ALTER TABLE instances ADD COLUMN last_turn_time timestamptz;
UPDATE instances i SET last_turn_time = t.latest
FROM (SELECT owner, instance_id, max(create_time) AS latest FROM turns GROUP BY owner, instance_id) t
WHERE t.owner = i.owner AND t.instance_id = i.id;
ALTER TABLE instances ADD COLUMN activity_time timestamptz
    GENERATED ALWAYS AS (coalesce(last_turn_time, create_time)) STORED;
CREATE INDEX instances_activity ON instances (owner, activity_time DESC, id DESC);

-- Search by name (ILIKE, within the owner) reads the owner's rows in instances_activity order and stops
-- at the page: no trigram index here, since pg_trgm's operator classes live in the schema that first
-- created the extension (feedback's), which chat must not depend on.

-- Turn counts per listed instance: distinct turn indexes of its messages, from the index alone.
CREATE INDEX messages_instance_turn ON messages (owner, instance_id, turn_index);
