-- The completion funnel without a row per conversation (issue 17, "reads that stay flat"): ENGAGED counted
-- the `conversation_activity` rows of the window and LATEST_STATES the `latest_choices` rows (migration
-- 0012), one index entry per conversation: ≈ 250k of them over 30 days at 1M reports / 10M ratings, and
-- GetFeedbackStats grew with the table. Two rollups of those rollups, kept by triggers, exact at every
-- commit (repository/statistics.py reads them; the window's first, partial hour still comes from rows):
--
-- activity_hour_counts: how many (conversation, owner) have their latest activity in each UTC hour
-- (the hour a `conversation_activity` row holds). latest_choice_hour_counts: how many answered
-- conversations have their latest choice of an aspect in each UTC hour, per choice.
-- A row's move is -1 on its old key and +1 on its new one, in key order (so two writers never take two
-- counter rows in opposite orders: migration 0015); writers in different sessions add to different
-- `shard`s (pg_backend_pid() % 16), as in migration 0010.

CREATE TABLE activity_hour_counts (
    hour  timestamptz NOT NULL,
    shard smallint    NOT NULL,
    n     bigint      NOT NULL,
    PRIMARY KEY (hour, shard)
);

CREATE TABLE latest_choice_hour_counts (
    aspect text        NOT NULL,
    hour   timestamptz NOT NULL,
    choice text        NOT NULL,
    shard  smallint    NOT NULL,
    n      bigint      NOT NULL,
    PRIMARY KEY (aspect, hour, choice, shard)
);

CREATE FUNCTION add_activity_count(h timestamptz, delta integer) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO activity_hour_counts AS c VALUES (h, pg_backend_pid() % 16, delta)
    ON CONFLICT (hour, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
$$;

CREATE FUNCTION add_choice_count(asp text, h timestamptz, ch text, delta integer) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO latest_choice_hour_counts AS c VALUES (asp, h, ch, pg_backend_pid() % 16, delta)
    ON CONFLICT (aspect, hour, choice, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
$$;

CREATE FUNCTION count_activity() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.last_hour = NEW.last_hour THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM add_activity_count(OLD.last_hour, -1);
    ELSIF TG_OP = 'INSERT' THEN
        PERFORM add_activity_count(NEW.last_hour, 1);
    ELSIF OLD.last_hour < NEW.last_hour THEN
        PERFORM add_activity_count(OLD.last_hour, -1);
        PERFORM add_activity_count(NEW.last_hour, 1);
    ELSE
        PERFORM add_activity_count(NEW.last_hour, 1);
        PERFORM add_activity_count(OLD.last_hour, -1);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION count_latest_choice() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    oh timestamptz;
    nh timestamptz;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        oh := date_trunc('hour', OLD.update_time, 'UTC');
    END IF;
    IF TG_OP <> 'DELETE' THEN
        nh := date_trunc('hour', NEW.update_time, 'UTC');
    END IF;
    IF TG_OP = 'UPDATE' AND (OLD.aspect, oh, OLD.choice) = (NEW.aspect, nh, NEW.choice) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM add_choice_count(OLD.aspect, oh, OLD.choice, -1);
    ELSIF TG_OP = 'INSERT' THEN
        PERFORM add_choice_count(NEW.aspect, nh, NEW.choice, 1);
    ELSIF (OLD.aspect, oh, OLD.choice) < (NEW.aspect, nh, NEW.choice) THEN
        PERFORM add_choice_count(OLD.aspect, oh, OLD.choice, -1);
        PERFORM add_choice_count(NEW.aspect, nh, NEW.choice, 1);
    ELSE
        PERFORM add_choice_count(NEW.aspect, nh, NEW.choice, 1);
        PERFORM add_choice_count(OLD.aspect, oh, OLD.choice, -1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER conversation_activity_hour_counts AFTER INSERT OR DELETE OR UPDATE OF last_hour
    ON conversation_activity FOR EACH ROW EXECUTE FUNCTION count_activity();
CREATE TRIGGER latest_choices_hour_counts AFTER INSERT OR DELETE OR UPDATE OF aspect, choice, update_time
    ON latest_choices FOR EACH ROW EXECUTE FUNCTION count_latest_choice();

-- What is already stored.
INSERT INTO activity_hour_counts SELECT last_hour, 0, count(*) FROM conversation_activity GROUP BY 1;
INSERT INTO latest_choice_hour_counts
SELECT aspect, date_trunc('hour', update_time, 'UTC'), choice, 0, count(*) FROM latest_choices GROUP BY 1, 2, 3;
