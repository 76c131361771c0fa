-- The completion funnel from rollups too (issue 17; repository/statistics.py ENGAGED, LATEST_STATES):
-- both counted conversations by reading every rating and report of the window.
--
-- conversation_activity: per (conversation, owner), the UTC hour of its latest USER rating update or
-- report. Moves forward on a write only when the hour changes (a write in the same hour takes no row
-- lock: many clients rating one conversation do not queue); recomputed from the rows when a row
-- leaves (delete, origin change). A read counts the conversations active after the window's first
-- hour from here, and those of that partial hour from the rows.
-- latest_choices: per (conversation, owner, aspect), the latest USER rating that has a choice (by
-- update_time, then turn index): the funnel's "latest state" is this row when it lies in the window.

CREATE TABLE conversation_activity (
    conversation text        NOT NULL,
    owner        text        NOT NULL,
    last_hour    timestamptz NOT NULL,
    PRIMARY KEY (conversation, owner)
);
CREATE INDEX conversation_activity_hour ON conversation_activity (last_hour);

CREATE TABLE latest_choices (
    conversation text        NOT NULL,
    owner        text        NOT NULL,
    aspect       text        NOT NULL,
    choice       text        NOT NULL,
    update_time  timestamptz NOT NULL,
    turn_index   integer     NOT NULL,
    PRIMARY KEY (conversation, owner, aspect)
);
CREATE INDEX latest_choices_aspect_time ON latest_choices (aspect, update_time);

CREATE FUNCTION touch_activity(conv text, who text, t timestamptz) RETURNS void LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    h timestamptz := date_trunc('hour', t, 'UTC');
BEGIN
    UPDATE conversation_activity SET last_hour = h WHERE conversation = conv AND owner = who AND last_hour < h;
    IF NOT FOUND THEN
        INSERT INTO conversation_activity VALUES (conv, who, h) ON CONFLICT DO NOTHING;
    END IF;
END $$;

CREATE FUNCTION recount_activity(conv text, who text) RETURNS void LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    t timestamptz := GREATEST(
        (SELECT max(update_time) FROM ratings WHERE owner = who AND conversation = conv AND origin = 1),
        (SELECT max(create_time) FROM feedback WHERE owner = who AND instance = conv));
BEGIN
    IF t IS NULL THEN
        DELETE FROM conversation_activity WHERE conversation = conv AND owner = who;
    ELSE
        INSERT INTO conversation_activity VALUES (conv, who, date_trunc('hour', t, 'UTC'))
        ON CONFLICT (conversation, owner) DO UPDATE SET last_hour = EXCLUDED.last_hour;
    END IF;
END $$;

CREATE FUNCTION recount_choice(conv text, who text, asp text) RETURNS void LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    r record;
BEGIN
    SELECT choice, update_time, turn_index INTO r FROM ratings
    WHERE owner = who AND conversation = conv AND aspect = asp AND origin = 1 AND choice <> ''
    ORDER BY update_time DESC, turn_index DESC LIMIT 1;
    IF NOT FOUND THEN
        DELETE FROM latest_choices WHERE conversation = conv AND owner = who AND aspect = asp;
    ELSE
        INSERT INTO latest_choices VALUES (conv, who, asp, r.choice, r.update_time, r.turn_index)
        ON CONFLICT (conversation, owner, aspect) DO UPDATE
            SET choice = EXCLUDED.choice, update_time = EXCLUDED.update_time, turn_index = EXCLUDED.turn_index;
    END IF;
END $$;

CREATE FUNCTION track_rating() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.origin = 1 THEN
        PERFORM touch_activity(NEW.conversation, NEW.owner, NEW.update_time);
    END IF;
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND (OLD.origin = 1 AND NEW.origin <> 1
            OR OLD.update_time > NEW.update_time OR OLD.conversation <> NEW.conversation OR OLD.owner <> NEW.owner)) THEN
        PERFORM recount_activity(OLD.conversation, OLD.owner);
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.choice <> '' AND OLD.origin = 1 THEN
        PERFORM recount_choice(OLD.conversation, OLD.owner, OLD.aspect);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.choice <> '' AND NEW.origin = 1
       AND (TG_OP = 'INSERT' OR (NEW.conversation, NEW.owner, NEW.aspect) IS DISTINCT FROM (OLD.conversation, OLD.owner, OLD.aspect)
            OR OLD.choice = '' OR OLD.origin <> 1) THEN
        PERFORM recount_choice(NEW.conversation, NEW.owner, NEW.aspect);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION track_report() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.instance <> '' THEN
        PERFORM touch_activity(NEW.instance, NEW.owner, NEW.create_time);
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.instance <> '' AND (TG_OP = 'DELETE' OR OLD.instance <> NEW.instance
            OR OLD.owner <> NEW.owner OR OLD.create_time > NEW.create_time) THEN
        PERFORM recount_activity(OLD.instance, OLD.owner);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER ratings_activity AFTER INSERT OR DELETE
    OR UPDATE OF origin, update_time, conversation, owner, aspect, choice, turn_index
    ON ratings FOR EACH ROW EXECUTE FUNCTION track_rating();
CREATE TRIGGER feedback_activity AFTER INSERT OR DELETE OR UPDATE OF instance, owner, create_time
    ON feedback FOR EACH ROW EXECUTE FUNCTION track_report();

-- What is already stored.
INSERT INTO conversation_activity
SELECT conversation, owner, date_trunc('hour', max(t), 'UTC') FROM (
    SELECT conversation, owner, update_time AS t FROM ratings WHERE origin = 1
    UNION ALL
    SELECT instance, owner, create_time FROM feedback WHERE instance <> '') AS a
GROUP BY conversation, owner;
INSERT INTO latest_choices
SELECT DISTINCT ON (conversation, owner, aspect) conversation, owner, aspect, choice, update_time, turn_index
FROM ratings WHERE origin = 1 AND choice <> ''
ORDER BY conversation, owner, aspect, update_time DESC, turn_index DESC;
