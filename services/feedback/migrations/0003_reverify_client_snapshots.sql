-- Before 0002 the capture worker froze spans into rows whose CLIENT snapshot the chat service had
-- never verified, so a forged anchor could pull another owner's tool calls into a report. Drop any
-- such copy and put those rows back in the verification queue: the worker captures them again only
-- once the chat service confirms the anchor for the row's owner (else: UNAVAILABLE, unverified).
UPDATE feedback SET trace_snapshot = '{}'::jsonb, capture_span_count = -1, capture_time = NULL,
    trace_state = 1, next_capture_at = NULL, refresh_at = now(),
    version = version + 1, update_time = GREATEST(now(), update_time)
WHERE snapshot_source = 2 AND trace_state IN (1, 2);
