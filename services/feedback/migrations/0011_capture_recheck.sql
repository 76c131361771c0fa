-- Copies frozen incomplete (trace_state CAPTURED with next_capture_at set: their turn's spans stopped
-- arriving, services/feedback/evidence.py decide_capture) stay in the capture queue until complete.
CREATE INDEX feedback_capture_recheck ON feedback (next_capture_at)
    WHERE trace_state = 2 AND next_capture_at IS NOT NULL;
