"""OpenTelemetry metrics for every service: a MeterProvider per service process, read by the Prometheus
exporter (`opentelemetry-exporter-prometheus`) on the service's `*_METRICS_LISTEN` address
(`host:port`; port 0 = any free port; empty = no endpoint), and pushed over OTLP as well when
`OTEL_METRICS_EXPORTER` names `otlp` (e.g. `prometheus,otlp`; the standard `OTEL_EXPORTER_OTLP_*`
variables set the endpoint). A provider per service (not the global one) lets tests run several
services in one process, each with its own endpoint and `service.name`.

`RpcMetrics` records the OpenTelemetry RPC semantic conventions' `rpc.server.duration` histogram
(milliseconds) with `rpc.system`, `rpc.service`, `rpc.method`, `rpc.grpc.status_code`: Prometheus
shows it as `rpc_server_duration_milliseconds_{bucket,count,sum}`, the `_count` being the calls by
method and status. Labels are low-cardinality only (never owner, trace or message ids).

Per-call instruments on the hot paths (`LocalCounter`, `LocalHistogram`) keep their state in plain
per-process structures (an integer add; a bucket index by `bisect`: ≈ 1 µs a call, where the SDK's
`Counter.add` / `Histogram.record` cost 16-26 µs) and are published at collection time, under the same
names, units, labels, buckets and instrumentation scope: counters as observable counters, histograms
added to what each reader of `ServiceMetrics` collects (cumulative, or delta when the reader prefers it).
"""
from __future__ import annotations

import bisect
import logging
import os
import time
from typing import Any

import grpc
from opentelemetry.metrics import Meter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics._internal.instrument import _Histogram
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, MetricsData, ResourceMetrics, ScopeMetrics,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.sdk.resources import Resource

log = logging.getLogger(__name__)

# Milliseconds: 1 ms … 60 s (RPCs of this system: sub-ms reads to agent turns of tens of seconds).
RPC_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
# Seconds: 0.5 ms … 10 s (database commits, probes).
DB_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

_STATUS_BY_VALUE = {c.value[0]: c for c in grpc.StatusCode}


class ServiceMetrics:
    """One service's metrics: `.meter` to create instruments; `.port` of its Prometheus endpoint (0 when
    none; served by `await start()` on the service's own event loop with aiohttp, so observable
    callbacks read asyncio state on its thread); `await close()` stops the endpoint and flushes OTLP."""

    def __init__(self, service_name: str, listen: str = ""):
        from prometheus_client import CollectorRegistry  # noqa: PLC0415

        readers: list[Any] = []
        self.registry = CollectorRegistry(auto_describe=True)
        self.port = 0
        self._listen = listen
        self._runner: Any = None
        if listen:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: PLC0415

            readers.append(PrometheusMetricReader(registry=self.registry))
        otlp = "otlp" in os.environ.get("OTEL_METRICS_EXPORTER", "").lower().split(",")
        if otlp:
            readers.append(_otlp_reader())
        views = [
            View(instrument_name="rpc.server.duration", aggregation=ExplicitBucketHistogramAggregation(RPC_BUCKETS_MS)),
            View(instrument_name="*.duration", instrument_unit="s",
                 aggregation=ExplicitBucketHistogramAggregation(DB_BUCKETS_S)),
        ]
        resource = Resource.create({"service.name": service_name, "service.namespace": "agentfeedback"})
        # Exemplars (a sampled trace id per bucket) cost ≈ 8 µs a measurement and only OTLP carries them
        # (the Prometheus exporter drops them): sampled only for OTLP, unless OTEL_METRICS_EXEMPLAR_FILTER says.
        exemplars = None if otlp or os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER") else AlwaysOffExemplarFilter()
        # Local histograms carry no exemplars: with exemplars wanted, per-call histograms stay on the SDK.
        self.exemplars = exemplars is None
        self.provider = MeterProvider(resource=resource, metric_readers=readers, views=views, exemplar_filter=exemplars)
        self.meter: Meter = self.provider.get_meter(f"agentfeedback.{service_name}")
        self._resource = resource
        self._scope = InstrumentationScope(f"agentfeedback.{service_name}")
        self._histograms: list[LocalHistogram] = []
        for reader in readers:
            # The SDK's collect callback (set by the MeterProvider above): wrapped so that every collection
            # carries the local histograms too (readers have no public hook for points made outside the SDK).
            reader._collect = self._with_local(reader, reader._collect)

    def histogram(self, name: str, unit: str, description: str, bounds: tuple[float, ...]) -> LocalHistogram:
        """A `LocalHistogram` published with this service's metrics (explicit `bounds`, as a View gives)."""
        hist = LocalHistogram(name, unit, description, bounds)
        self._histograms.append(hist)
        return hist

    def _with_local(self, reader: Any, collect: Any):
        previous: dict[int, dict] = {}  # per histogram: the last cumulative points (for a delta reader)

        def collect_with_local(metric_reader: Any, timeout_millis: float = 10_000) -> MetricsData | None:
            data = collect(metric_reader, timeout_millis=timeout_millis)
            now = time.time_ns()
            delta = reader._instrument_class_temporality[_Histogram] == AggregationTemporality.DELTA
            extra = [m for h in self._histograms
                     if (m := h.metric(now, previous.setdefault(id(h), {}) if delta else None)) is not None]
            if not extra:
                return data
            if data is None or not data.resource_metrics:
                data = MetricsData([ResourceMetrics(self._resource, [], self._resource.schema_url)])
            first, *rest = data.resource_metrics
            scopes = list(first.scope_metrics)
            for i, sm in enumerate(scopes):
                if sm.scope.name == self._scope.name:
                    scopes[i] = ScopeMetrics(sm.scope, [*sm.metrics, *extra], sm.schema_url)
                    break
            else:
                scopes.append(ScopeMetrics(self._scope, extra, ""))
            return MetricsData([ResourceMetrics(first.resource, scopes, first.schema_url), *rest])

        return collect_with_local

    async def start(self) -> ServiceMetrics:
        """Serve GET /metrics (Prometheus text format) on the listen address; OSError when it is taken."""
        if not self._listen or self._runner is not None:
            return self
        from aiohttp import web  # noqa: PLC0415
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

        async def scrape(_request: web.Request) -> web.Response:
            return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", scrape)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        host, _, port = self._listen.rpartition(":")
        site = web.TCPSite(runner, host.strip("[]") or "127.0.0.1", int(port))
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def close(self) -> None:
        """Stop the endpoint, then flush and stop the readers (OTLP exports what it holds)."""
        if self._runner is not None:
            import asyncio  # noqa: PLC0415

            try:  # bounded: an open scrape connection never holds the stop up
                await asyncio.wait_for(self._runner.cleanup(), 2.0)
            except TimeoutError:
                log.warning("metrics endpoint did not close within 2 s")
            self._runner = None
        self.provider.shutdown()


class LocalCounter:
    """A monotonic counter in a dict (`add(n, attributes)`, as the SDK Counter's), published as the
    observable counter `name` (Prometheus: `<name>_total`). `attributes` dicts are few and reused: each
    distinct one (by value) is one series."""

    def __init__(self, meter: Meter, name: str, unit: str = "", description: str = ""):
        self._counts: dict[tuple, int] = {}
        self._attrs: dict[tuple, dict[str, Any]] = {}
        meter.create_observable_counter(name, [self._observe], unit=unit, description=description)

    def add(self, amount: int, attributes: dict[str, Any] | None = None) -> None:
        key = tuple(attributes.items()) if attributes else ()
        counts = self._counts
        if key in counts:
            counts[key] += amount
        else:
            self._attrs[key] = dict(attributes or {})
            counts[key] = amount

    def _observe(self, _options: CallbackOptions) -> list[Observation]:
        return [Observation(n, self._attrs[k]) for k, n in list(self._counts.items())]


class LocalHistogram:
    """An explicit-bucket histogram in plain lists: `record(value, key, attributes)`, where `key` is any
    hashable that stands for `attributes` (the caller's cache key: no per-call attribute hashing).
    Buckets are Prometheus' `le` (upper bound inclusive), as the SDK's. Made by `ServiceMetrics.histogram`."""

    def __init__(self, name: str, unit: str, description: str, bounds: tuple[float, ...]):
        self.name, self.unit, self.description = name, unit, description
        self._bounds = tuple(bounds)
        # key -> [attributes, bucket counts, sum, min, max]
        self._points: dict[Any, list] = {}
        self._start_ns = time.time_ns()

    def record(self, value: float, key: Any, attributes: dict[str, Any]) -> None:
        point = self._points.get(key)
        if point is None:
            point = self._points[key] = [attributes, [0] * (len(self._bounds) + 1), 0.0, value, value]
        point[1][bisect.bisect_left(self._bounds, value)] += 1
        point[2] += value
        if value < point[3]:
            point[3] = value
        elif value > point[4]:
            point[4] = value

    def metric(self, now_ns: int, previous: dict | None = None) -> Metric | None:
        """The points as an SDK Metric: cumulative, or the change since the last call when `previous`
        (this reader's last cumulative counts, updated here) is given. None: nothing recorded."""
        points = []
        for key, (attrs, counts, total, lo, hi) in list(self._points.items()):
            counts = list(counts)  # a snapshot: the count is the buckets' sum, whatever records meanwhile
            start = self._start_ns
            if previous is not None:
                last = previous.get(key)
                previous[key] = (counts, total, now_ns)
                if last is not None:
                    counts, total, start = [a - b for a, b in zip(counts, last[0], strict=True)], total - last[1], last[2]
            points.append(HistogramDataPoint(attrs, start, now_ns, sum(counts), total, counts, self._bounds, lo, hi))
        if not points:
            return None
        temporality = AggregationTemporality.DELTA if previous is not None else AggregationTemporality.CUMULATIVE
        return Metric(self.name, self.description, self.unit, Histogram(points, temporality))


def _otlp_reader():
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader  # noqa: PLC0415

    protocol = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # noqa: PLC0415
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter  # type: ignore[assignment]  # noqa: PLC0415
    return PeriodicExportingMetricReader(OTLPMetricExporter())


def pool_gauges(meter: Meter, pool: Any, pool_name: str) -> None:
    """`db.client.connections.usage` (state=idle|used) and `db.client.connections.max` of an asyncpg pool
    (OpenTelemetry database semantic conventions, `pool.name` = the schema)."""
    from opentelemetry.metrics import Observation  # noqa: PLC0415

    def usage(_options):
        size, idle = pool.get_size(), pool.get_idle_size()
        return [Observation(idle, {"pool.name": pool_name, "state": "idle"}),
                Observation(size - idle, {"pool.name": pool_name, "state": "used"})]

    meter.create_observable_up_down_counter("db.client.connections.usage", [usage], unit="{connection}",
                                            description="Connections of the pool, by state (idle | used).")
    meter.create_observable_up_down_counter(
        "db.client.connections.max", [lambda _o: [Observation(pool.get_max_size(), {"pool.name": pool_name})]],
        unit="{connection}", description="Most connections the pool opens.")


class RpcMetrics:
    """`rpc.server.duration` by method and status code (see the module docstring)."""

    def __init__(self, metrics: ServiceMetrics):
        description = "Duration of inbound RPCs, by rpc.service, rpc.method and rpc.grpc.status_code."
        self._local = None if metrics.exemplars else metrics.histogram(
            "rpc.server.duration", "ms", description, RPC_BUCKETS_MS)
        self._hist = metrics.meter.create_histogram("rpc.server.duration", unit="ms", description=description) \
            if self._local is None else None
        self._attrs: dict[tuple[str, int], dict[str, Any]] = {}

    def record(self, method: str, code: int, duration_s: float) -> None:
        key = (method, code)
        attrs = self._attrs.get(key)
        if attrs is None:
            service, _, name = method.lstrip("/").rpartition("/")
            attrs = self._attrs[key] = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name,
                                        "rpc.grpc.status_code": code}
        if self._local is not None:
            self._local.record(duration_s * 1000.0, key, attrs)
        else:
            self._hist.record(duration_s * 1000.0, attrs)


def status_code_of(context: grpc.aio.ServicerContext) -> int:
    """The status code an RPC ended with after the servicer aborted itself (2 = UNKNOWN when unset)."""
    try:
        code = context.code()
    except Exception:  # noqa: BLE001 - older grpcio without ServicerContext.code()
        return grpc.StatusCode.UNKNOWN.value[0]
    if isinstance(code, grpc.StatusCode):
        return code.value[0]
    if isinstance(code, int):
        return code
    return grpc.StatusCode.UNKNOWN.value[0]
