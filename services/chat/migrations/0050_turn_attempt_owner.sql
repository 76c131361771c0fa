-- The gateway process running the current attempt of a turn: the key of the session advisory lock that
-- process holds for its life (services/chat/liveness.py). NULL: a row from before this column, or a
-- process without the lock (then only the stale-time rule, turn.STALE_MARGIN_S, says its owner is gone).
-- A RUNNING attempt whose key no session holds has a dead owner: a retry takes it over at once.
ALTER TABLE turns ADD COLUMN attempt_owner bigint;
