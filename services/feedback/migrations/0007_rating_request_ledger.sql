-- PutRating request ids (AIP-155): a put retried with its request id — even after later puts changed the
-- rating — writes nothing and answers with the rating as it is; the same id with a different request is
-- INVALID_ARGUMENT. One row per applied put that carried a request id, recorded by the put's own
-- statement; kept 24 h (pruned by the capture worker's hourly pass, index below).
CREATE TABLE rating_requests (
    owner                text        NOT NULL,
    request_id           uuid        NOT NULL,
    rating_id            text        NOT NULL,
    -- services.common.ids.request_fingerprint of the PutRatingRequest.
    request_fingerprint  bytea       NOT NULL,
    create_time          timestamptz NOT NULL,
    PRIMARY KEY (owner, request_id)
);
CREATE INDEX rating_requests_time ON rating_requests (create_time);
