-- GetFeedbackStats from rollups (issue 17): counting 30 days of ratings and reports row by row grows
-- with the tables (≈ 0.1 s at 30k reports / 300k ratings, seconds at 1M / 10M). Triggers keep hourly
-- counts, exact at every commit; a statistics read sums ≤ 24 × window_days hours of them and counts only
-- the first, partial hour from the tables themselves (repository/ratings.py STATS_*).
--
-- Counted: USER-origin ratings by the hour (UTC) of update_time, scope, aspect, sentiment; reports by
-- the hour of create_time and category. A row's move (update, delete, origin change) is -1 on its old
-- key and +1 on its new one. Writers in different sessions add to different `shard`s
-- (pg_backend_pid() % 16), so concurrent PutRatings of one aspect do not queue on one counter row.

CREATE TABLE rating_hour_counts (
    hour      timestamptz NOT NULL,
    scope     smallint    NOT NULL,
    aspect    text        NOT NULL,
    sentiment smallint    NOT NULL,
    shard     smallint    NOT NULL,
    n         bigint      NOT NULL,
    PRIMARY KEY (hour, scope, aspect, sentiment, shard)
);

CREATE TABLE report_hour_counts (
    hour      timestamptz NOT NULL,
    category  smallint    NOT NULL,
    shard     smallint    NOT NULL,
    n         bigint      NOT NULL,
    PRIMARY KEY (hour, category, shard)
);

CREATE FUNCTION count_rating() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    old_on boolean := TG_OP <> 'INSERT' AND OLD.origin = 1;
    new_on boolean := TG_OP <> 'DELETE' AND NEW.origin = 1;
BEGIN
    IF old_on AND new_on AND date_trunc('hour', OLD.update_time, 'UTC') = date_trunc('hour', NEW.update_time, 'UTC')
       AND OLD.scope = NEW.scope AND OLD.aspect = NEW.aspect AND OLD.sentiment = NEW.sentiment THEN
        RETURN NULL;
    END IF;
    IF old_on THEN
        INSERT INTO rating_hour_counts AS c VALUES
            (date_trunc('hour', OLD.update_time, 'UTC'), OLD.scope, OLD.aspect, OLD.sentiment, pg_backend_pid() % 16, -1)
        ON CONFLICT (hour, scope, aspect, sentiment, shard) DO UPDATE SET n = c.n - 1;
    END IF;
    IF new_on THEN
        INSERT INTO rating_hour_counts AS c VALUES
            (date_trunc('hour', NEW.update_time, 'UTC'), NEW.scope, NEW.aspect, NEW.sentiment, pg_backend_pid() % 16, 1)
        ON CONFLICT (hour, scope, aspect, sentiment, shard) DO UPDATE SET n = c.n + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION count_report() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.category = NEW.category AND OLD.create_time = NEW.create_time THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO report_hour_counts AS c VALUES
            (date_trunc('hour', OLD.create_time, 'UTC'), OLD.category, pg_backend_pid() % 16, -1)
        ON CONFLICT (hour, category, shard) DO UPDATE SET n = c.n - 1;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO report_hour_counts AS c VALUES
            (date_trunc('hour', NEW.create_time, 'UTC'), NEW.category, pg_backend_pid() % 16, 1)
        ON CONFLICT (hour, category, shard) DO UPDATE SET n = c.n + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER ratings_hour_counts AFTER INSERT OR DELETE OR UPDATE OF origin, scope, aspect, sentiment, update_time
    ON ratings FOR EACH ROW EXECUTE FUNCTION count_rating();
CREATE TRIGGER feedback_hour_counts AFTER INSERT OR DELETE OR UPDATE OF category, create_time
    ON feedback FOR EACH ROW EXECUTE FUNCTION count_report();

-- What is already stored.
INSERT INTO rating_hour_counts
SELECT date_trunc('hour', update_time, 'UTC'), scope, aspect, sentiment, 0, count(*)
FROM ratings WHERE origin = 1 GROUP BY 1, 2, 3, 4;
INSERT INTO report_hour_counts
SELECT date_trunc('hour', create_time, 'UTC'), category, 0, count(*) FROM feedback GROUP BY 1, 2;
