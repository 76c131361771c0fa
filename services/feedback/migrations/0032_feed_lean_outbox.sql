-- The change feed's outbox keeps only its primary key (xid, seq) (issue 24, bench_feed): every read walks
-- it in position order from the reader's position (an owner's stream filters the events after it, as
-- few as were written since its last read), and retention deletes a prefix in that order, so the owner and
-- time indexes only cost each rating and report write an index insert (PutRating with the outbox: 0.86
-- of the put without it, on a loaded machine; the target is 0.95).
DROP INDEX feed_events_owner;
DROP INDEX feed_events_time;
