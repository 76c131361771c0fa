-- Request ids are bound to their request (AIP-155): a request_id reused with a different request is
-- refused (INVALID_ARGUMENT) instead of silently answered with the first result.
-- SHA-256 of the deterministic serialization of the request without its request_id
-- (services.common.ids.request_fingerprint); NULL on rows stored before this migration (a retry of
-- those is accepted as before).
ALTER TABLE instances ADD COLUMN request_fingerprint bytea;
ALTER TABLE turns ADD COLUMN request_fingerprint bytea;
