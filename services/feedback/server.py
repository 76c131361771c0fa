"""Feedback service wiring: migrations, pool, channels to the chat service and the collector, the
capture worker, the ticket sink, the gRPC server (auth + scopes + spans + error mapping).

`create_server(settings, database_url=..., tracer_provider=...)` returns a started GrpcServer
(`.port`); `stop(grace_s)` drains RPCs, then stops the worker and closes channels, sink and pool.
"""
from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from pathlib import Path

import grpc
from aiohttp.abc import AbstractResolver
from opentelemetry.sdk.trace import TracerProvider

from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.common.auth import SCOPE_CHAT, SCOPE_TRACES_READ, Authenticator, ServiceToken, dev_secret, mint_token
from services.common.db import close_pool, migrate, resolve_database_url
from services.common.quota import write_quota_interceptor
from services.common.metrics import RpcMetrics, ServiceMetrics, pool_gauges
from services.common.server import GrpcServer, ServiceInterceptor, client_channel
from services.common.span_pipe import span_export_metrics
from services.common.telemetry import setup_tracing
from services.feedback import repository, retries
from services.feedback.capture import CaptureWorker
from services.feedback.chat_client import ChatClient
from services.feedback.ratings import Ratings
from services.feedback.report_cap import ReportCap
from services.feedback.reports import Reports
from services.feedback.repository.audit import AuditStore
from services.feedback.repository.claims import ClaimStore
from services.feedback.repository.capture import CaptureStore
from services.feedback.repository.ratings import RatingStore
from services.feedback.repository.reports import ReportStore
from services.feedback.repository.statistics import StatisticsStore
from services.feedback.servicer import METHOD_SCOPES, SERVICE, FeedbackServicer
from services.feedback.metrics import FeedbackMetrics
from services.feedback.settings import FeedbackSettings
from services.feedback.statistics import Stats
from services.feedback.ticket import TicketFields
from services.feedback.traces_client import TracesClient
from services.feedback.audit import Audit
from services.feedback.claims import Claims
from services.feedback.defect_reports import DefectReports
from services.feedback.tracker import make_sink
from services.feedback import codec_feed, evaluation_events, webhook_secrets
from services.feedback.dataset import Datasets
from services.feedback.feed import Feed
from services.feedback.repository.dataset import DatasetStore
from services.feedback.repository.evaluations import EvaluationStore
from services.feedback.evaluations import Evaluations
from services.feedback.repository.webhooks import WebhookStore
from services.feedback.webhooks import DeliveryPolicy, Webhooks
from services.feedback.feed_wakeups import FeedWakeups, PokeAfterWrites
from services.feedback.repository.feed import FeedStore
from services.feedback.repository.quotes import QuoteStore
from services.feedback.quote_index import QuoteIndexer

MIGRATIONS = Path(__file__).parent / "migrations"
SERVICE_SUB = "svc:feedback"
# Counted by the per-owner write quota (services/common/quota.py); deletes are never limited.
WRITE_METHODS = ("CreateFeedback", "UpdateFeedback", "FileFeedback", "PutRating", "CopyRatings",
                 "ReportSuspectedDefect")
# Every method that may change what the change feed shows: each call ends with a wake-up of the streams.
FEED_WRITE_METHODS = frozenset(f"/{SERVICE}/{m}" for m in (*WRITE_METHODS, "DeleteFeedback", "DeleteRating",
                                                              "AcceptEvaluations"))


class _ServiceToken(ServiceToken):
    """The worker's `traces:read` token: the configured one, or minted from the HS256 secret (re-minted
    before it expires)."""

    def __init__(self, settings: FeedbackSettings):
        super().__init__(settings, settings.service_token.get_secret_value(), SERVICE_SUB, (SCOPE_TRACES_READ,))

    def owner_token(self, owner: str) -> str | None:
        """A 5-minute on-behalf-of token (scope `chat` only) to refresh a client snapshot; None without
        the HS256 secret."""
        return mint_token(self._secret, owner, (SCOPE_CHAT,), 300) if self._secret else None


async def create_server(settings: FeedbackSettings, *, database_url: str | None = None,
                        tracer_provider: TracerProvider | None = None, run_worker: bool = True,
                        clock: Callable[[], dt.datetime] | None = None,
                        chat_channel: grpc.aio.Channel | None = None,
                        webhook_resolver: AbstractResolver | None = None) -> GrpcServer:
    """Start FeedbackService on `settings.listen` (port 0 = any free port). See the module docstring.

    run_worker: False starts no capture worker in this process (another replica does the work).
    clock: the wall clock (UTC) used for retention decisions; tests pass a shifted one to age data.
    chat_channel: the channel to the chat service (closed on stop); default `client_channel(settings.chat_target)`.
    The in-process test stack passes one whose target it learns after binding chat on port 0 (chat needs
    feedback's port first: tests/stack.py).
    webhook_resolver: where webhook delivery looks up receivers' names before the address guard checks
    them (services/feedback/webhook_addresses.py); default the system's resolver. Tests pass a fixed table.
    """
    url = database_url or resolve_database_url(settings)
    await migrate(url, "feedback", MIGRATIONS)
    pool = await repository.create_pool(url, settings.db_pool_min, settings.db_pool_max, settings.db_command_timeout_s)
    own_provider = tracer_provider is None
    tp = tracer_provider or setup_tracing("feedback")
    tracer = tp.get_tracer("agentfeedback.feedback")
    if chat_channel is None:
        chat_channel = client_channel(settings.chat_target)
    traces_channel = client_channel(settings.traces_target)
    report_store, capture_store = ReportStore(pool), CaptureStore(pool)
    chat = ChatClient(chat_channel, settings.chat_timeout_s)
    tokens = _ServiceToken(settings)
    worker = CaptureWorker(capture_store, TracesClient(traces_channel, tokens), chat, settings, tokens.owner_token, clock,
                           tracer=tracer)
    sink = make_sink(settings)
    authenticator = Authenticator(settings)
    now = clock or (lambda: dt.datetime.now(dt.UTC))
    reports = Reports(report_store, chat, sink, tracer,
                      TicketFields(body=settings.tracker_include_body, message_text=settings.tracker_include_message_text,
                                   trace_url_template=settings.trace_url_template),
                      settings.filing_capture_wait_s, worker.wake if run_worker else None, authenticator)
    ratings = Ratings(RatingStore(pool), chat, settings.rating_check_cache_s)
    wakeups = FeedWakeups(url, pool)
    await wakeups.start()
    audit = Audit(AuditStore(pool))
    feed = Feed(FeedStore(pool), wakeups, audit, retention_days=settings.feed_retention_days,
                heartbeat_s=settings.feed_heartbeat_s, page_size=settings.feed_page_size, clock=now)
    server_feed = feed
    key = settings.webhook_key.get_secret_value() or webhook_secrets.derived_key(dev_secret(settings))
    webhooks = Webhooks(WebhookStore(pool), FeedStore(pool), wakeups, webhook_secrets.SecretBox(key),
                        DeliveryPolicy(settings.webhook_timeout_s, settings.webhook_max_attempts,
                                       settings.webhook_backoff_first_s, settings.webhook_backoff_max_s),
                        lambda item: codec_feed.watch_response(item, now(), settings.trace_retention_days).event,
                        settings.feed_retention_days, settings.webhook_allow_private_networks, webhook_resolver)
    evaluation_store = EvaluationStore(pool)
    servicer = FeedbackServicer(reports, ratings, Stats(StatisticsStore(pool), now, evaluation_store), audit,
                                DefectReports(chat, reports), feed, webhooks, Datasets(DatasetStore(pool), chat),
                                Claims(ClaimStore(pool)), Evaluations(evaluation_store, chat),
                                settings.trace_retention_days,
                                settings.rating_note_max_bytes, now)

    servicer.trace_url_template = settings.trace_url_template
    if settings.max_reports_per_owner > 0:
        reports.cap = ReportCap(settings.max_reports_per_owner, settings.write_quota_per_minute)
    quota = await write_quota_interceptor(url, pool, settings.write_quota_per_minute, SERVICE, WRITE_METHODS,
                                          answered=retries.answered_checks(report_store), burst=settings.write_quota_burst,
                                          valid=servicer.request_checks())
    metrics = await ServiceMetrics("feedback", settings.metrics_listen).start()
    pool_gauges(metrics.meter, pool, "feedback")
    span_export_metrics(metrics.meter, tp)
    fm = FeedbackMetrics(metrics.meter, capture_store)
    quote_index = QuoteIndexer(QuoteStore(pool))

    def report_created(author) -> None:  # a stored report: counted, and its quote pending (migration 0095)
        fm.report_created(author)
        quote_index.wake()

    def capture_wrote() -> None:  # a capture pass may have replaced a snapshot's quoted text
        wakeups.poke()
        quote_index.wake()

    reports.on_created, ratings.on_written = report_created, fm.rating_written
    worker.on_written = capture_wrote
    ratings.on_evaluated = functools.partial(evaluation_events.emit_rating, tracer)
    server_refresh = fm.refresh
    server = GrpcServer([ServiceInterceptor(authenticator, METHOD_SCOPES, tracer, metrics=RpcMetrics(metrics)),
                         quota, PokeAfterWrites(wakeups, FEED_WRITE_METHODS)],
                        grace_s=settings.shutdown_grace_s, drain_delay_s=settings.shutdown_drain_s)
    server.metrics = metrics
    server.metrics_refresh = server_refresh  # type: ignore[attr-defined] - tests read the backlog now
    server.on_drain.append(feed.close_streams)
    server.feed = server_feed  # type: ignore[attr-defined] - tests run a retention pass with an aged clock
    server.watch_database(url)
    server.add(feedback_pb2_grpc.add_FeedbackServiceServicer_to_server, servicer, SERVICE)
    server.bind(settings.listen)
    await server.start()
    if run_worker:
        worker.start()
    feed.start_pruning(settings.feed_prune_interval_s)
    if run_worker:
        webhooks.start()
        quote_index.start()
    fm.start()

    async def close() -> None:
        await fm.stop()  # before the pool closes: a backlog read in flight would fail on it
        await worker.stop()
        await quote_index.stop()
        await feed.stop()
        await webhooks.stop()
        await wakeups.stop()
        await chat_channel.close()
        await traces_channel.close()
        await sink.close()
        await close_pool(pool)
        if own_provider:
            tp.shutdown()
        await metrics.close()

    server.on_stop(close)
    return server
