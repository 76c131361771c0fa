-- Dead columns: `feedback.last_update_request_id` / `last_update_fingerprint` held the last UpdateFeedback
-- request id of a row; 0006 copied them into the update ledger (now `request_ledger`, 0013) and no code
-- has read or written them since.
ALTER TABLE feedback DROP COLUMN IF EXISTS last_update_request_id, DROP COLUMN IF EXISTS last_update_fingerprint;
