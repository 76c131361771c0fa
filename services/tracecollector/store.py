"""The collector's storage port: what ingest, TraceQueryService, retention and the feedback capture
(through GetTrace) need from wherever spans live. Two adapters: `repository.Repository` (PostgreSQL,
the embedded default) and `clickhouse.ClickHouseStore` (the OpenTelemetry Collector clickhouse
exporter's tables); `CollectorSettings.span_store` chooses.

Rows handed to `copy_spans` are what `row_encoder` makes (ingest.flatten; None: ingest.ROW_FIELDS
tuples); spans read back are mappings with the keys
query.span_proto reads (attributes as JSON text on PostgreSQL, decoded dicts on ClickHouse, whose
records also carry `stored_chars`, the length of the JSON text they were decoded from:
trace_budget.stored_chars, GetTrace's cheap size test).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any, Protocol

from services.tracecollector.ingest import RowEncoder
from services.tracecollector.writer import Row


class SpanStore(Protocol):
    name: str  # "postgresql" | "clickhouse": the metrics' `exporter` label
    row_encoder: RowEncoder | None  # the store's row form, encoded from OTLP (None: ROW_FIELDS tuples)

    async def copy_spans(self, rows: Sequence[Row]) -> None:
        """Store `rows`; stored (committed) when this returns, else raises."""

    async def get_trace(self, trace_id: bytes) -> Sequence[Mapping[str, Any]]:
        """The spans of one trace, one per span id, ordered by start time then span id."""

    async def search_trace_ids(
        self, *, start_ns: int, end_ns: int, service_name: str, span_name: str, attributes: dict[str, str],
        status_code: int | None, min_duration_ns: int, after: tuple[int, bytes] | None, limit: int,
    ) -> list[tuple[bytes, int]]:
        """(trace_id, earliest matching start in [start_ns, end_ns)) newest first, then trace id;
        strictly after the keyset `after`; at most `limit`."""

    async def summarize_traces(self, trace_ids: list[bytes]) -> Mapping[bytes, Mapping[str, Any]]:
        """root_name, service_name, root_start, root_duration, span_count, status_code by trace id."""

    async def search_traces(self, *, summarize: int, **filters: Any) -> tuple[
            list[tuple[bytes, int]], Mapping[bytes, Mapping[str, Any]]]:
        """A SearchTraces page: search_trace_ids(**filters) and summarize_traces of its first `summarize`
        ids (a store may take both from fewer statements)."""

    async def day_dropped(self, day: date) -> bool:
        """Whether retention dropped the spans of UTC `day`."""

    async def stored_days(self) -> list[date]:
        """UTC days that hold (PostgreSQL: have a partition for) spans, oldest first."""

    async def span_count(self) -> int:
        """Stored span rows (retried duplicates included)."""
