-- The review queue's judgements (issue 28): ListRatings over every conversation of one owner
-- (`instances/-`), newest first by update time (repository/ratings.py LIST_OWNER_RATINGS), keyset on
-- (update_time, id). Owner-first, so one owner's page never walks another's rows.
CREATE INDEX ratings_owner_time ON ratings (owner, update_time DESC, id DESC);
