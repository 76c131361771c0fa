-- Concurrent PutRatings that move ratings between two sentiments in opposite directions (A: NEGATIVE →
-- POSITIVE, B: POSITIVE → NEGATIVE) in one counter shard took the two counter rows of
-- rating_hour_counts in opposite orders and deadlocked (migration 0010, seen in bench_feedback). The -1
-- and the +1 now go in key order, so every writer locks counter rows in the same order.
CREATE FUNCTION add_rating_count(h timestamptz, sc smallint, asp text, se smallint, delta integer) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO rating_hour_counts AS c VALUES (h, sc, asp, se, pg_backend_pid() % 16, delta)
    ON CONFLICT (hour, scope, aspect, sentiment, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
$$;

CREATE OR REPLACE FUNCTION count_rating() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    old_on boolean := TG_OP <> 'INSERT' AND OLD.origin = 1;
    new_on boolean := TG_OP <> 'DELETE' AND NEW.origin = 1;
    oh timestamptz;
    nh timestamptz;
BEGIN
    IF old_on THEN
        oh := date_trunc('hour', OLD.update_time, 'UTC');
    END IF;
    IF new_on THEN
        nh := date_trunc('hour', NEW.update_time, 'UTC');
    END IF;
    IF old_on AND new_on AND (oh, OLD.scope, OLD.aspect, OLD.sentiment) = (nh, NEW.scope, NEW.aspect, NEW.sentiment) THEN
        RETURN NULL;
    END IF;
    IF old_on AND (NOT new_on OR (oh, OLD.scope, OLD.aspect, OLD.sentiment) < (nh, NEW.scope, NEW.aspect, NEW.sentiment)) THEN
        PERFORM add_rating_count(oh, OLD.scope, OLD.aspect, OLD.sentiment, -1);
        IF new_on THEN
            PERFORM add_rating_count(nh, NEW.scope, NEW.aspect, NEW.sentiment, 1);
        END IF;
    ELSIF new_on THEN
        PERFORM add_rating_count(nh, NEW.scope, NEW.aspect, NEW.sentiment, 1);
        IF old_on THEN
            PERFORM add_rating_count(oh, OLD.scope, OLD.aspect, OLD.sentiment, -1);
        END IF;
    END IF;
    RETURN NULL;
END $$;
