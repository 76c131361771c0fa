-- When the current attempt of a RUNNING turn started (NULL: the first attempt, at create_time).
-- A RUNNING turn whose attempt is older than the agent deadline cap plus a margin has no live owner
-- (its process died mid-turn): a retry with its request_id claims it (services/chat/turn.py).
ALTER TABLE turns ADD COLUMN attempt_time timestamptz;
