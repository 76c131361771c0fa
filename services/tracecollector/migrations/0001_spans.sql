-- Spans, range-partitioned by UTC day on start time (design.md "Trace collector").
--
-- Partition key: `start_ns`, integer nanoseconds since the Unix epoch (OTLP's own unit, so no
-- conversion on ingest and no precision loss; design.md: "span times are integer nanoseconds").
-- One partition per UTC day `spans_pYYYYMMDD` holding [day 00:00, next day 00:00) UTC, created
-- ahead of time by the retention pass (retention.py); there is deliberately NO default partition:
-- spans outside the window are rejected through partial_success, and DETACH ... CONCURRENTLY
-- (used to drop a day without stalling ingest) requires that no default partition exists.
--
-- Duplicates (exporter retries re-send the same span): rows are appended with COPY and no unique
-- constraint; every read collapses rows with one (trace_id, span_id) to one span (repository.py).
-- Measured in tests/bench/bench_collector.py: a unique key forces COPY into a staging table +
-- INSERT ... ON CONFLICT, which costs more than deduplicating the few retried rows at read time.
CREATE TABLE spans (
    trace_id            bytea    NOT NULL,  -- 16 bytes
    span_id             bytea    NOT NULL,  -- 8 bytes
    parent_span_id      bytea,              -- 8 bytes, NULL for a root span
    start_ns            bigint   NOT NULL,
    end_ns              bigint   NOT NULL,
    name                text     NOT NULL,
    kind                smallint NOT NULL,  -- OTLP Span.SpanKind
    status_code         smallint NOT NULL,  -- OTLP Status.StatusCode
    status_message      text     NOT NULL,
    service_name        text     NOT NULL,  -- resource attribute service.name ('' when absent)
    scope_name          text     NOT NULL,
    trace_state         text     NOT NULL,
    attributes          jsonb    NOT NULL,  -- {key: value}; see ingest.py for the AnyValue mapping
    resource_attributes jsonb    NOT NULL,
    events              jsonb,              -- [{time_unix_nano, name, attributes}] or NULL
    links               jsonb               -- [{trace_id, span_id, trace_state, attributes}] or NULL
) PARTITION BY RANGE (start_ns);

-- GetTrace: one probe per daily partition (15 by default); hash indexes are smaller than btree
-- for 16 random bytes and answer equality in O(1).
CREATE INDEX spans_trace_id_idx ON spans USING hash (trace_id);
-- SearchTraces by service within a time range.
CREATE INDEX spans_service_start_idx ON spans (service_name, start_ns);
-- SearchTraces by time range alone: rows arrive roughly in start order, so a BRIN index is tiny.
CREATE INDEX spans_start_brin ON spans USING brin (start_ns);

-- Days whose partition the retention pass dropped (so GetTrace can say TRACE_EXPIRED when the
-- caller gives a time hint that falls on such a day, see query.py).
CREATE TABLE dropped_days (
    day        date        PRIMARY KEY,
    dropped_at timestamptz NOT NULL DEFAULT now()
);
