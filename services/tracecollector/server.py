"""Trace collector wiring: OTLP/gRPC (4317: traces and logs), OTLP/HTTP (4318: /v1/traces and /v1/logs),
TraceQueryService (50053). Logs carry evaluation events only (logs.py); nothing else of them is stored.

`create_server(settings, *, database_url, tracer_provider)` opens the span store (`span_store`:
PostgreSQL — applies the `traces` migrations, creates the pool, makes the partitions of the retention
window; ClickHouse — creates the exporter's tables if missing), starts the span writer, the
retention loop, the optional forwarder and the three listeners, and returns a started
`CollectorServer` (`.ports` = {"otlp_grpc", "otlp_http", "query"}, `.port` = the query port,
`.retention` for an on-demand pass, `async stop(grace_s)`).

Stop order: health NOT_SERVING → OTLP listeners drain (in-flight Exports finish, so what was
acknowledged is committed) → writer flushes → forwarder flushes → query server drains → retention
loop stops → pool (or ClickHouse client) closes.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import asyncpg
import grpc
from agentfeedback.traces.v1 import traces_pb2_grpc
from aiohttp import web
from opentelemetry import trace
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from services.common.auth import SCOPE_FEEDBACK_EVALUATIONS, Authenticator, ServiceToken
from services.common.db import close_pool, create_pool, migrate
from services.common.health import DependencyWatch
from services.common.metrics import RpcMetrics, ServiceMetrics, pool_gauges
from services.common.server import GrpcServer, ServiceInterceptor, client_channel
from services.tracecollector import evaluations, otlp_grpc, otlp_http
from services.tracecollector.evaluation_delivery import DeliveryPolicy, EvaluationDelivery
from services.tracecollector.evaluation_outbox import OutboxStore
from services.tracecollector.forwarder import Forwarder
from services.tracecollector.ingest_auth import IngestTokens, TokenInterceptor
from services.tracecollector.ingest import Ingestor, Window
from services.tracecollector.logs import LogsIngestor
from services.tracecollector.writer import BatchWriter
from services.tracecollector.metrics import CollectorMetrics
from services.tracecollector.query import METHOD_SCOPES, TraceQueryServicer, TraceReader
from services.tracecollector.clickhouse import ClickHouseStore, Tables
from services.tracecollector.clickhouse_transport import ClickHouseTransport, HttpTransport
from services.tracecollector.repository import Repository
from services.tracecollector.retention import Retention, TtlRetention
from services.tracecollector.settings import CollectorSettings

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
SCHEMA = "traces"


class CollectorServer:
    """The running collector: its listeners, writer, retention loop and pool."""

    def __init__(self, settings: CollectorSettings):
        self.settings = settings
        self.ports: dict[str, int] = {}
        self.port = 0
        self.otlp: GrpcServer | None = None
        self.query: GrpcServer | None = None
        self.http_runner: web.AppRunner | None = None
        self.writer: BatchWriter | None = None
        self.forwarder: Forwarder | None = None
        self.retention: Retention | TtlRetention | None = None
        self.repo: Repository | ClickHouseStore | None = None
        self._retention_task: asyncio.Task | None = None
        self._pool = None
        self.metrics: ServiceMetrics | None = None
        self.evaluations: EvaluationDelivery | None = None
        self.logs: LogsIngestor | None = None
        self._feedback_channel = None

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain and stop everything (see module docstring for the order)."""
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        if self.http_runner is not None:
            await self.http_runner.shutdown()
        if self.otlp is not None:
            await self.otlp.stop(grace)
        if self.http_runner is not None:
            await self.http_runner.cleanup()
        if self.writer is not None:
            await self.writer.close(timeout_s=max(grace, 5.0))
        if self.forwarder is not None:
            await self.forwarder.close(timeout_s=grace)
        if self.evaluations is not None:
            await self.evaluations.close()
        if self._feedback_channel is not None:
            await self._feedback_channel.close()
        if self.query is not None:
            await self.query.stop(grace)
        if self._retention_task is not None:
            self._retention_task.cancel()
            await asyncio.gather(self._retention_task, return_exceptions=True)
        if self._pool is not None:
            await close_pool(self._pool)
        if isinstance(self.repo, ClickHouseStore):
            await self.repo.close()
        if self.metrics is not None:
            await self.metrics.close()


def _http_port(runner: web.AppRunner) -> int:
    for site in runner.sites:
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            return server.sockets[0].getsockname()[1]
    raise OSError("OTLP/HTTP listener has no socket")


async def create_server(
    settings: CollectorSettings,
    *,
    database_url: str | None = None,
    tracer_provider=None,
    clock: Callable[[], int] = time.time_ns,
    span_transport: ClickHouseTransport | None = None,
    feedback_channel: grpc.aio.Channel | None = None,
) -> CollectorServer:
    """Start the collector (see module docstring). `clock` (ns since the epoch) is for tests;
    `span_transport` replaces the ClickHouse HTTP client (tests: clickhouse_transport.ChdbTransport);
    `feedback_channel` (tests: one connected once feedback is bound) replaces `feedback_target`'s.

    Raises OSError when a listen address cannot be bound, asyncpg errors when the database is
    unreachable, MigrationError on a changed migration, ClickHouseError when ClickHouse is.
    """
    clickhouse = settings.span_store == "clickhouse"
    url = database_url or settings.database_url
    if not url and not clickhouse:
        raise ValueError("database_url is required (resolve it with services.common.db.resolve_database_url)")
    if clickhouse and span_transport is None and not settings.clickhouse_url:
        raise ValueError("span_store=clickhouse needs clickhouse_url (AGENTFEEDBACK_COLLECTOR_CLICKHOUSE_URL)")
    srv = CollectorServer(settings)
    try:
        srv.metrics = await ServiceMetrics("tracecollector", settings.metrics_listen).start()
        if clickhouse:
            transport = span_transport or HttpTransport(
                settings.clickhouse_url, password=settings.clickhouse_password.get_secret_value())
            repo = srv.repo = ClickHouseStore(transport, Tables(
                settings.clickhouse_database, settings.clickhouse_traces_table, settings.clickhouse_cluster))
            if settings.clickhouse_create_schema:
                await repo.create_schema(settings.retention_days)
            srv.retention = TtlRetention(repo, retention_days=settings.retention_days,
                                         interval_s=settings.retention_interval_s, clock=clock)
        else:
            await migrate(url, SCHEMA, MIGRATIONS)
            srv._pool = await create_pool(url, SCHEMA, settings.db_pool_min,
                                          max(settings.db_pool_max, settings.writer_workers + 2),
                                          command_timeout_s=settings.db_command_timeout_s)
            repo = srv.repo = Repository(srv._pool)
            pool_gauges(srv.metrics.meter, srv._pool, SCHEMA)
            srv.retention = Retention(repo, retention_days=settings.retention_days,
                                      ahead_days=settings.partitions_ahead_days,
                                      interval_s=settings.retention_interval_s, clock=clock)
        cm = CollectorMetrics(srv.metrics.meter, store=repo.name)
        srv.retention.on_pass = cm.retention_pass
        await srv.retention.run_once()
        srv._retention_task = asyncio.create_task(srv.retention.run_forever(), name="retention")

        def window() -> Window:
            return Window.at(clock(), settings.retention_days, settings.max_future_skew_s)

        retention = srv.retention

        async def copy(rows) -> None:
            try:
                await repo.copy_spans(rows)
            except asyncpg.CheckViolationError:  # PostgreSQL only
                # A row's day has no partition yet (e.g. the clock passed the days made ahead while
                # no pass ran): make them now, then store.
                await retention.run_once()
                await repo.copy_spans(rows)

        # On a transport that runs one statement at a time, a second writer only splits the queue into
        # smaller INSERTs waiting their turn: one writer takes it whole (chdb, bench_span_stores' ingest,
        # 2 vs 1 writers alternated: load 11-16, mean INSERT 1250-1333 → 1875 spans and 85-110 → 73-79 µs
        # CPU per span; load 5.6, equal INSERTs and CPU, 3,529-3,662 → 4,176-4,342 spans/s).
        workers = 1 if clickhouse and transport.serial else settings.writer_workers
        srv.writer = BatchWriter(cm.timed_copy(copy), max_spans=settings.queue_max_spans,
                                 batch_max_spans=settings.batch_max_spans, workers=workers,
                                 retry_after_s=settings.retry_after_s)
        if settings.forward_endpoint:
            srv.forwarder = Forwarder(settings.forward_endpoint, queue_max=settings.forward_queue_max,
                                      timeout_s=settings.forward_timeout_s,
                                      max_attempts=settings.forward_max_attempts)
        cm.queue(repo.name, lambda: srv.writer.queued_spans, settings.queue_max_spans)
        if srv.forwarder is not None:
            srv.forwarder.on_spans = cm.forwarded
            cm.queue("otlp_forward", lambda: srv.forwarder.queued, settings.forward_queue_max)
        keep_evaluations = keep = None
        wants_evaluations = bool(settings.feedback_target) or feedback_channel is not None
        if wants_evaluations and clickhouse and url:
            # Spans on ClickHouse, but the evaluation outbox needs a transaction that commits before the
            # Export is answered and rows deleted once delivered: it stays in PostgreSQL (the traces
            # schema; its span tables unused). No database URL: evaluations are refused (logs.py says why).
            await migrate(url, SCHEMA, MIGRATIONS)
            srv._pool = await create_pool(url, SCHEMA, 1, 4, command_timeout_s=settings.db_command_timeout_s)
            pool_gauges(srv.metrics.meter, srv._pool, SCHEMA)
        if wants_evaluations and srv._pool is not None:
            outbox = OutboxStore(srv._pool)
            srv._feedback_channel = feedback_channel or client_channel(settings.feedback_target)
            token = ServiceToken(settings, settings.evaluations_token.get_secret_value(), "tracecollector",
                                 (SCOPE_FEEDBACK_EVALUATIONS,))
            delivery = srv.evaluations = EvaluationDelivery(outbox, srv._feedback_channel, token, DeliveryPolicy(
                retry_first_s=settings.evaluations_retry_first_s, retry_max_s=settings.evaluations_retry_max_s,
                pending_days=settings.evaluations_pending_days, poll_s=settings.evaluations_poll_s))
            delivery.on_outcome = cm.evaluation_outcome
            delivery.start()

            async def keep(found) -> None:
                """Evaluations into the outbox (committed on return), then the delivery worker woken."""
                await outbox.put([(evaluations.key(e), e.SerializeToString(deterministic=True)) for e in found])
                delivery.wake()

            async def keep_evaluations(request, marked) -> None:
                found = evaluations.extract(request, marked, settings.evaluations_own_namespace)
                if found:
                    await keep(found)

        ingestor = Ingestor(srv.writer, window, srv.forwarder.submit if srv.forwarder else None, keep_evaluations,
                            encoder=repo.row_encoder, limits=settings.limits())
        logs = LogsIngestor(settings.evaluations_own_namespace, keep, max_queued=settings.evaluations_queue_max,
                            retry_after_s=settings.retry_after_s)
        srv.logs = logs
        rpc_metrics = RpcMetrics(srv.metrics)

        provider = tracer_provider or trace.get_tracer_provider()
        tracer = provider.get_tracer("services.tracecollector")
        # OTLP/gRPC: no JWT, untraced; grpc enforces the 4 MiB limit after decompression. With ingest
        # tokens, the token check comes first (ingest_auth.py): a refused call is never deserialised.
        ingest_tokens = settings.otlp_tokens()
        tokens = IngestTokens(ingest_tokens) if ingest_tokens else None
        otlp_interceptors = [ServiceInterceptor(None, {}, tracer, public_prefixes=otlp_grpc.PUBLIC_PREFIXES,
                                                metrics=rpc_metrics)]
        if tokens is not None:
            signals = {f"/{otlp_grpc.SERVICE_NAME}/": "traces", f"/{otlp_grpc.LOGS_SERVICE_NAME}/": "logs"}
            otlp_interceptors.insert(0, TokenInterceptor(tokens, signals, cm.ingest_refused, rpc_metrics.record))
        srv.otlp = GrpcServer(
            otlp_interceptors,
            grace_s=settings.shutdown_grace_s, drain_delay_s=settings.shutdown_drain_s, max_message_bytes=settings.grpc_max_message_bytes,
        )
        srv.otlp.add(trace_service_pb2_grpc.add_TraceServiceServicer_to_server,
                     otlp_grpc.TraceServiceServicer(cm.receiver(ingestor, "grpc"), settings.retry_after_s),
                     otlp_grpc.SERVICE_NAME)
        srv.otlp.add(logs_service_pb2_grpc.add_LogsServiceServicer_to_server,
                     otlp_grpc.LogsServiceServicer(cm.logs_receiver(logs, "grpc"), settings.retry_after_s),
                     otlp_grpc.LOGS_SERVICE_NAME)
        srv.ports["otlp_grpc"] = srv.otlp.bind(settings.otlp_grpc_listen)
        await srv.otlp.start()

        reader = TraceReader(repo, window, max_search_days=settings.retention_days,
                             trace_budget_bytes=settings.get_trace_budget_bytes)
        srv.query = GrpcServer([ServiceInterceptor(Authenticator(settings), METHOD_SCOPES, tracer, metrics=rpc_metrics)],
                               grace_s=settings.shutdown_grace_s, drain_delay_s=settings.shutdown_drain_s)
        srv.query.add(traces_pb2_grpc.add_TraceQueryServiceServicer_to_server, TraceQueryServicer(reader),
                      "agentfeedback.traces.v1.TraceQueryService")
        srv.ports["query"] = srv.port = srv.query.bind(settings.query_listen)
        srv.query.metrics = srv.metrics
        if clickhouse:
            srv.query.watch(DependencyWatch([srv.query, srv.otlp], repo.ping, dependency="clickhouse",
                                            meter=srv.metrics.meter))
        else:
            srv.query.watch_database(url, also=[srv.otlp])
        await srv.query.start()

        app = otlp_http.create_app(cm.receiver(ingestor, "http"), max_body_bytes=settings.http_max_body_bytes,
                                   retry_after_s=settings.retry_after_s, logs=cm.logs_receiver(logs, "http"),
                                   tokens=tokens, on_refused=cm.ingest_refused)
        srv.http_runner = otlp_http.app_runner(app, access_log=None)
        await srv.http_runner.setup()
        await web.TCPSite(srv.http_runner, settings.otlp_http_host, settings.otlp_http_port).start()
        srv.ports["otlp_http"] = _http_port(srv.http_runner)
    except BaseException:
        await srv.stop(0)
        raise
    log.info("trace collector: OTLP/gRPC %d, OTLP/HTTP %d, query %d, metrics %d (0: none); OTLP ingest takes %s",
             srv.ports["otlp_grpc"], srv.ports["otlp_http"], srv.ports["query"], srv.metrics.port,
             f"{len(settings.otlp_tokens())} bearer token(s)" if settings.otlp_tokens() else "no token")
    return srv
