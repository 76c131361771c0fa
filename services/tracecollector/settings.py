"""Trace collector settings (prefix `AGENTFEEDBACK_COLLECTOR_`), validated once at start-up."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from services.common.settings import LISTEN_PATTERN, CommonSettings
from services.tracecollector.ingest_auth import split_tokens
from services.tracecollector.limits import RESOURCE_ATTRIBUTES_BYTE_LIMIT, Limits
from services.tracecollector.trace_budget import GET_TRACE_BUDGET_BYTES


class CollectorSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_COLLECTOR_", extra="ignore")

    # OTLP/gRPC TraceService/Export and LogsService/Export (OTLP default port 4317).
    otlp_grpc_listen: str = Field(default="127.0.0.1:4317", pattern=LISTEN_PATTERN)
    # OTLP/HTTP POST /v1/traces and /v1/logs: listen host.
    otlp_http_host: str = "127.0.0.1"
    # OTLP/HTTP listen port (OTLP default 4318; 0 = any free port).
    otlp_http_port: int = Field(default=4318, ge=0, le=65535)
    # Bearer tokens OTLP ingest takes (both listeners, traces and logs), comma-separated: two while one is
    # rotated out. Set: an Export without `authorization: Bearer <one of them>` is UNAUTHENTICATED (HTTP 401)
    # and nothing of it is stored. Each 16 to 4096 characters of A-Z a-z 0-9 - . _ ~ + / (RFC 6750).
    # Empty = ingest open to whoever reaches the listeners (loopback by default).
    otlp_bearer_tokens: SecretStr = SecretStr("")
    # TraceQueryService (docs/architecture.md "Processes": 50053).
    query_listen: str = Field(default="127.0.0.1:50053", pattern=LISTEN_PATTERN)
    # Prometheus metrics endpoint (`host:port`, port 0 = any free port; empty = none): GET /metrics.
    metrics_listen: str = Field(default="127.0.0.1:9463", pattern=r"^$|" + LISTEN_PATTERN)
    # Days of spans kept; whole UTC-day partitions older than this are dropped.
    retention_days: int = Field(default=14, ge=1)
    # Spans starting more than this many seconds in the future are rejected.
    max_future_skew_s: int = Field(default=3600, ge=0)
    # Seconds between retention passes (partition creation ahead + drops).
    retention_interval_s: float = Field(default=3600.0, gt=0)
    # Write queue bound in spans; beyond it Export answers UNAVAILABLE + RetryInfo (HTTP 503).
    queue_max_spans: int = Field(default=200_000, ge=1)
    # Spans per COPY batch (group commit across concurrent Exports).
    batch_max_spans: int = Field(default=20_000, ge=1)
    # Concurrent COPY writers (each holds one pool connection while it writes a batch).
    writer_workers: int = Field(default=2, ge=1)
    # Daily partitions created ahead of today (a missed retention pass never leaves a gap).
    partitions_ahead_days: int = Field(default=3, ge=1)
    # Retry delay suggested to exporters when over capacity, seconds.
    retry_after_s: float = Field(default=1.0, gt=0)
    # OTLP/HTTP body limit in bytes after decompression (docs/architecture.md "Spans": 20 MiB); beyond it 413.
    http_max_body_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    # OTLP/gRPC message limit in bytes after decompression (4 MiB); beyond it RESOURCE_EXHAUSTED.
    grpc_max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    # Characters a stored string attribute value keeps (each string of an array/kvlist; bytes values: bytes;
    # attribute keys and event names too); longer ones are cut, the span stored (OpenTelemetry
    # AttributeValueLengthLimit; docs/choices.md "Attribute limits").
    attribute_value_length_limit: int = Field(default=16 * 1024, ge=1)
    # Distinct attributes a span, event or link keeps; further ones are dropped and counted in its
    # dropped_attributes_count (OpenTelemetry AttributeCountLimit, whose default is 128).
    attribute_count_limit: int = Field(default=128, ge=1)
    # Characters a stored span name and service name keep (service.name is btree-indexed: at most 2704 bytes).
    span_name_length_limit: int = Field(default=512, ge=1, le=676)
    # Events a span keeps (the first ones sent); further ones are dropped and counted in its
    # dropped_events_count (OpenTelemetry EventCountLimit, whose default is 128).
    span_event_count_limit: int = Field(default=128, ge=1)
    # Links a span keeps (the first ones sent); further ones are dropped and counted in its
    # dropped_links_count (OpenTelemetry LinkCountLimit, whose default is 128).
    span_link_count_limit: int = Field(default=128, ge=1)
    # Encoded bytes of a resource's attributes (OTLP KeyValues) kept in all, after their values are cut:
    # service.name, then the others in the order sent while they fit; the rest are dropped and counted in
    # the resource's dropped_attributes_count (the resource is stored with every span; docs/choices.md
    # "Attribute limits").
    resource_attributes_byte_limit: int = Field(default=RESOURCE_ATTRIBUTES_BYTE_LIMIT, ge=1)
    # Encoded bytes of a GetTrace answer: every span is kept, the largest attribute values are cut (with a
    # marker, counted in Trace.truncated_value_count) until it fits; below gRPC's 4 MiB default receive
    # limit of the clients (docs/choices.md "GetTrace answer budget").
    get_trace_budget_bytes: int = Field(default=GET_TRACE_BUDGET_BYTES, ge=64 * 1024)
    # Where spans live: `postgresql` (the embedded default, the service's database) or `clickhouse` (the
    # OpenTelemetry Collector clickhouse exporter's tables; docs/architecture.md "Spans on ClickHouse").
    span_store: Literal["postgresql", "clickhouse"] = "postgresql"
    # ClickHouse HTTP(S) endpoint for span_store=clickhouse: `http[s]://user@host:port` (8123 / 8443).
    clickhouse_url: str = ""
    # ClickHouse password (kept out of the URL so it is never logged).
    clickhouse_password: SecretStr = SecretStr("")
    # ClickHouse database of the span tables (the exporter's `database`; deploy/ uses `otel`).
    clickhouse_database: str = Field(default="otel", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    # The exporter's `traces_table_name`: spans in it, trace ids in `<it>_trace_id_ts`.
    clickhouse_traces_table: str = Field(default="otel_traces", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,50}$")
    # ClickHouse cluster (ON CLUSTER; empty = one server): local `<table>_local` ReplicatedMergeTree tables, Distributed `<table>`.
    clickhouse_cluster: str = Field(default="", pattern=r"^$|^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    # Create the tables if missing (CREATE ... IF NOT EXISTS, as the exporter's `create_schema`) and add our column.
    clickhouse_create_schema: bool = True
    # Optional downstream OTLP/gRPC endpoint (the SREs' backend) receiving every accepted span.
    forward_endpoint: str = ""
    # Export requests waiting for the downstream; beyond it the oldest are dropped (and counted).
    forward_queue_max: int = Field(default=1000, ge=1)
    # Seconds one attempt to forward an Export may take.
    forward_timeout_s: float = Field(default=10.0, gt=0)
    # Attempts (retryable failures, exponential backoff) before a forwarded request is dropped.
    forward_max_attempts: int = Field(default=5, ge=1)
    # The FeedbackService (`host:port`) that takes the evaluations other systems send with their spans
    # (services/tracecollector/README.md "Evaluations"); empty = evaluations are not read from spans.
    # The outbox is a table of the collector's PostgreSQL schema: with span_store=clickhouse it needs
    # database_url too (only the outbox is kept there).
    feedback_target: str = ""
    # Bearer token with scope `feedback:evaluations` for it; empty = minted from the HS256 dev secret.
    evaluations_token: SecretStr = SecretStr("")
    # Resources whose `service.namespace` is this are our own services: their evaluations are not read
    # again (no loop).
    evaluations_own_namespace: str = "agentfeedback"
    # Delivery retries: first delay and cap, seconds (doubling; an unknown turn is retried so too).
    evaluations_retry_first_s: float = Field(default=1.0, gt=0)
    evaluations_retry_max_s: float = Field(default=60.0, gt=0)
    # Days an evaluation is kept undelivered (its turn unknown, or feedback down) before it is dropped.
    evaluations_pending_days: int = Field(default=14, ge=1)
    # Evaluations from OTLP log records (POST /v1/logs, LogsService/Export) waiting for their commit across
    # Exports; beyond it Export answers UNAVAILABLE + RetryInfo (HTTP 503), as the span write queue does.
    evaluations_queue_max: int = Field(default=50_000, ge=1)
    # Seconds between looks at the outbox when nothing woke the worker.
    evaluations_poll_s: float = Field(default=1.0, gt=0)

    @field_validator("otlp_bearer_tokens")
    @classmethod
    def _tokens_well_formed(cls, v: SecretStr) -> SecretStr:
        split_tokens(v.get_secret_value())  # ValueError naming the bad one by position, never by value
        return v

    def otlp_tokens(self) -> tuple[str, ...]:
        """The OTLP ingest bearer tokens (`otlp_bearer_tokens` split); empty: ingest takes no token."""
        return split_tokens(self.otlp_bearer_tokens.get_secret_value())

    def limits(self) -> Limits:
        """The attribute limits (limits.py) these settings name."""
        return Limits(value_length=self.attribute_value_length_limit, count=self.attribute_count_limit,
                      name_length=self.span_name_length_limit, events=self.span_event_count_limit,
                      links=self.span_link_count_limit, resource_bytes=self.resource_attributes_byte_limit)
