"""The collector's metrics, named after the OpenTelemetry Collector's own (so SREs recognise them):

- `otelcol_receiver_accepted_spans` / `otelcol_receiver_refused_spans` (counters, labels `receiver`
  = `otlp`, `transport` = `grpc` | `http`): spans stored (acknowledged after commit) / not stored
  (rejected as invalid, refused over capacity, or the database failed);
- `otelcol_receiver_accepted_log_records` / `otelcol_receiver_refused_log_records` (same labels): log
  records answered OK (an evaluation event kept, any other record not stored: logs.py) / refused (an
  evaluation event rejected, or the Export failed);
- `agentfeedback_collector_ingest_unauthenticated` (counter, labels `transport` = `grpc` | `http`, `signal` =
  `traces` | `logs`, `reason` = `missing` | `invalid`): Exports refused for their bearer token
  (`otlp_bearer_tokens`, ingest_auth.py), in requests — their bodies are never decoded, so their spans are
  in neither counter above;
- `otelcol_exporter_queue_size` / `otelcol_exporter_queue_capacity` (gauges, label `exporter`):
  `postgresql` (or `clickhouse`, the span store in use) = the span write queue, in spans; `otlp_forward` = the forwarder's queue, in requests;
- `otelcol_exporter_sent_spans` / `otelcol_exporter_send_failed_spans` (counters, label `exporter`):
  `postgresql` / `clickhouse` = spans committed / failed to commit; `otlp_forward` = spans forwarded / dropped;
- `agentfeedback_collector_commit_duration_seconds` (histogram): one COPY batch, start to commit;
- `agentfeedback_collector_retention_runs` (counter, `result` = ok | error) and
  `agentfeedback_collector_retention_dropped_days` (counter): retention passes, UTC days dropped.
In Prometheus the counters carry the `_total` suffix (e.g. `otelcol_receiver_accepted_spans_total`).
"""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from opentelemetry.metrics import Meter, Observation

from services.tracecollector.evaluations import count_log_records
from services.tracecollector.ingest import ExportResult, Ingestor, count_spans


class CollectorMetrics:
    def __init__(self, meter: Meter, store: str = "postgresql"):
        self._store = store
        self.accepted = meter.create_counter("otelcol_receiver_accepted_spans", unit="{span}",
                                             description="Spans stored and acknowledged.")
        self.refused = meter.create_counter("otelcol_receiver_refused_spans", unit="{span}",
                                            description="Spans not stored (invalid, over capacity, database down).")
        self.accepted_logs = meter.create_counter(
            "otelcol_receiver_accepted_log_records", unit="{record}",
            description="Log records answered OK (evaluation events kept; others not stored).")
        self.refused_logs = meter.create_counter(
            "otelcol_receiver_refused_log_records", unit="{record}",
            description="Log records refused (evaluation events rejected, or not stored).")
        self.sent = meter.create_counter("otelcol_exporter_sent_spans", unit="{span}",
                                         description="Spans written to the exporter's destination.")
        self.failed = meter.create_counter("otelcol_exporter_send_failed_spans", unit="{span}",
                                           description="Spans the exporter failed to write.")
        self.commit = meter.create_histogram("agentfeedback.collector.commit.duration", unit="s",
                                             description="One COPY batch of spans, start to commit.")
        self.retention_runs = meter.create_counter("agentfeedback.collector.retention.runs", unit="{run}",
                                                   description="Retention passes, by result (ok | error).")
        self.dropped_days = meter.create_counter("agentfeedback.collector.retention.dropped_days", unit="{day}",
                                                 description="UTC days of spans dropped by retention.")
        self.evaluations = meter.create_counter(
            "agentfeedback.collector.evaluations", unit="{evaluation}",
            description="Evaluations handed to the feedback service, by outcome (accepted | rejected | pending | "
                        "failed | expired; issue 24).")
        self.unauthenticated = meter.create_counter(
            "agentfeedback.collector.ingest.unauthenticated", unit="{request}",
            description="OTLP Exports refused for their bearer token, by transport, signal and reason "
                        "(missing | invalid).")
        self._meter = meter
        self._queues: list[tuple[str, Callable[[], int], int]] = []
        meter.create_observable_gauge("otelcol_exporter_queue_size", [self._sizes], unit="{item}",
                                      description="Items waiting in the exporter's queue.")
        meter.create_observable_gauge("otelcol_exporter_queue_capacity", [self._capacities], unit="{item}",
                                      description="Capacity of the exporter's queue.")

    def queue(self, exporter: str, size: Callable[[], int], capacity: int) -> None:
        """Report a queue (`size()` read at each collection) under `exporter`."""
        self._queues.append((exporter, size, capacity))

    def _sizes(self, _options) -> list[Observation]:
        return [Observation(size(), {"exporter": name}) for name, size, _ in self._queues]

    def _capacities(self, _options) -> list[Observation]:
        return [Observation(cap, {"exporter": name}) for name, _, cap in self._queues]

    def timed_copy(self, copy: Callable[[Sequence[Any]], Awaitable[None]]) -> Callable[[Sequence[Any]], Awaitable[None]]:
        """`copy` measured: commit latency, spans sent / failed to the span store."""
        attrs = {"exporter": self._store}

        async def measured(rows: Sequence[Any]) -> None:
            t0 = time.perf_counter()
            try:
                await copy(rows)
            except BaseException:
                self.failed.add(len(rows), attrs)
                raise
            self.commit.record(time.perf_counter() - t0)
            self.sent.add(len(rows), attrs)

        return measured

    def receiver(self, ingestor: Ingestor, transport: str) -> Ingestor:
        """`ingestor` whose `export` counts accepted / refused spans for `transport` (grpc | http)."""
        return _CountingIngestor(ingestor, self.accepted, self.refused, count_spans,
                                 {"receiver": "otlp", "transport": transport})

    def logs_receiver(self, ingestor, transport: str):
        """The logs ingestor (logs.LogsIngestor) whose `export` counts accepted / refused log records."""
        return _CountingIngestor(ingestor, self.accepted_logs, self.refused_logs, count_log_records,
                                 {"receiver": "otlp", "transport": transport})

    def evaluation_outcome(self, outcome: str, n: int) -> None:
        """`n` evaluations of one delivery pass had `outcome` (services/tracecollector/evaluation_delivery.py)."""
        self.evaluations.add(n, {"outcome": outcome})

    def ingest_refused(self, transport: str, signal: str, reason: str) -> None:
        """One Export refused for its bearer token (ingest_auth.py's `on_refused` hook)."""
        self.unauthenticated.add(1, {"transport": transport, "signal": signal, "reason": reason})

    def forwarded(self, outcome: str, spans: int) -> None:
        """The forwarder's `on_spans` hook: `outcome` sent | dropped."""
        (self.sent if outcome == "sent" else self.failed).add(spans, {"exporter": "otlp_forward"})

    def retention_pass(self, ok: bool, dropped_days: int) -> None:
        self.retention_runs.add(1, {"result": "ok" if ok else "error"})
        if dropped_days:
            self.dropped_days.add(dropped_days)


class _CountingIngestor:
    def __init__(self, inner, accepted, refused, count: Callable[[Any], int], attrs: dict[str, str]):
        self._inner, self._accepted, self._refused, self._count, self._attrs = inner, accepted, refused, count, attrs

    async def export(self, request) -> ExportResult:
        try:
            result = await self._inner.export(request)
        except Exception:
            self._refused.add(self._count(request), self._attrs)
            raise
        if result.accepted:
            self._accepted.add(result.accepted, self._attrs)
        if result.rejected:
            self._refused.add(result.rejected, self._attrs)
        return result
