-- Issue 24: evaluations other systems sent (migration 0060) flow out like the owners' ratings. Their
-- changes enter the change feed's outbox (migration 0030) from a trigger, in the accepting statement's
-- own transaction (a committed evaluation always has its event, a rolled-back one never does), as kind
-- 3 (evaluation, `evaluations/{id}`) with the conversation's owner, the scope and the evaluation's name
-- as the aspect (the admin filters). AcceptEvaluations' no-op repeat writes no row, so no event; a
-- changed value bumps `version`, so one `updated` event.
CREATE FUNCTION feed_evaluation_event() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO feed_events (kind, action, resource_id, owner, scope, aspect)
        VALUES (3, 3, OLD.id, OLD.owner, OLD.scope, OLD.name);
    ELSE
        INSERT INTO feed_events (kind, action, resource_id, owner, scope, aspect)
        VALUES (3, CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE 2 END, NEW.id, NEW.owner, NEW.scope, NEW.name);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER evaluations_feed AFTER INSERT OR DELETE ON evaluations
    FOR EACH ROW EXECUTE FUNCTION feed_evaluation_event();
CREATE TRIGGER evaluations_feed_change AFTER UPDATE ON evaluations FOR EACH ROW
    WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION feed_evaluation_event();

-- ExportDataset reads an owner's evaluated turns in (conversation, turn_index) order (repository/dataset.py).
CREATE INDEX evaluations_owner_turn ON evaluations (owner, conversation, turn_index);
