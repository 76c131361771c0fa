"""The OTLP logs use case (issue 24): evaluations that arrive as log records.

An evaluation pipeline using the OpenTelemetry Logs/Events API sends `gen_ai.evaluation.result` as a log
record (semantic-conventions `docs/general/events.md`: "Events are implemented as a specific type of
LogRecord"), to OTLP's `LogsService/Export` or `POST /v1/logs` (opentelemetry-proto
`docs/specification.md`). `LogsIngestor.export` picks those records (`evaluations.extract_logs`), stores
their evaluations in the evaluation outbox (`keep`) and returns only once they are committed, as the
trace path does; the Export is then acknowledged.

Every other log record is answered OK and not stored: this collector is not a log store (the SRE's own
backend is; point the SDK's or an OpenTelemetry Collector's log pipeline there too). Per OTLP "Partial
Success", only evaluation events that can never become ratings are counted in `rejected_log_records`
(no valid trace id, no name, neither label nor score; all of them when no feedback service is
configured, `keep` None); our own service.namespace's are skipped, neither kept nor rejected.

Bound: at most `max_queued` evaluations waiting for their commit across Exports; beyond it `Overloaded`
(UNAVAILABLE + RetryInfo / HTTP 503 + Retry-After, OTLP "Throttling"), so a slow database never grows
memory without bound. A database failure raises (UNAVAILABLE, the exporter retries; the outbox key makes
the retry one row).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentfeedback.feedback.v1 import feedback_pb2 as fpb
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from services.common.depfail import is_database_down
from services.common.incidents import INCIDENTS
from services.tracecollector import evaluations
from services.tracecollector.ingest import ExportResult
from services.tracecollector.writer import Overloaded

DISABLED = ("this collector hands no evaluations to a feedback service (AGENTFEEDBACK_COLLECTOR_FEEDBACK_TARGET "
            "is unset, or span_store is clickhouse without a database URL for the evaluation outbox)")


class LogsIngestor:
    """`keep(evaluations)` stores them durably (committed when it returns; None: evaluations are off)."""

    def __init__(self, own_namespace: str, keep: Callable[[list[fpb.Evaluation]], Awaitable[None]] | None, *,
                 max_queued: int, retry_after_s: float):
        self._own = own_namespace
        self._keep = keep
        self._max = max_queued
        self._retry_after_s = retry_after_s
        self.queued = 0

    async def export(self, request: logs_service_pb2.ExportLogsServiceRequest) -> ExportResult:
        """`accepted` = records answered OK (stored or not ours to store), `rejected` = evaluation events
        refused (see module docstring). Raises `Overloaded`, or the store's error (nothing acknowledged)."""
        n = evaluations.count_log_records(request)
        if n == 0:
            return ExportResult(0, 0, "")
        got = evaluations.extract_logs(request, self._own)
        if self._keep is None:
            refused = len(got.found) + got.rejected
            if not refused:
                return ExportResult(n, 0, "")
            return ExportResult(n - refused, refused, f"rejected {refused} gen_ai.evaluation.result log record(s): "
                                                      f"{DISABLED}")
        if got.found:
            k = len(got.found)
            if self.queued and self.queued + k > self._max:
                raise Overloaded(self._retry_after_s, self.queued, what="evaluations")
            self.queued += k
            try:
                await self._keep(got.found)
            except Exception as e:
                if is_database_down(e):  # one incident in the log, not a traceback per Export
                    INCIDENTS.failure("DATABASE_UNAVAILABLE", "evaluation events (OTLP logs) not stored", e)
                raise
            finally:
                self.queued -= k
        return ExportResult(n - got.rejected, got.rejected, got.error_message)
