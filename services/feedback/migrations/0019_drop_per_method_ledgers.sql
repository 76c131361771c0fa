-- The four per-method request ledgers that migration 0013 replaced by `request_ledger`: nothing
-- writes or reads them since then, and every replica runs a version newer than 0013.
DROP TABLE IF EXISTS deleted_feedback;
DROP TABLE IF EXISTS feedback_update_requests;
DROP TABLE IF EXISTS rating_requests;
DROP TABLE IF EXISTS copy_requests;

