"""Optional forwarding of accepted spans to a downstream OTLP/gRPC endpoint (the SREs' backend).

Its own bounded queue (`queue_max` Export requests): `submit` never waits, so a slow or dead
downstream never slows ingest; when the queue is full the oldest request is dropped and counted
(`dropped`). One sender task retries a request on retryable codes (OTLP table: UNAVAILABLE,
DEADLINE_EXCEEDED, …) with exponential backoff (honouring the server's RetryInfo delay when it is
longer), up to `max_attempts`, then drops it. Drops are logged once per incident, not per request.
Endpoint: `host:port` (plaintext) or `https://host:port` (TLS with the system roots).
"""
from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from services.common.incidents import INCIDENTS
from services.common.reconnect import RECONNECT_OPTIONS

log = logging.getLogger(__name__)
# Incident key of dropped requests: the first drop of an incident is a WARNING line, the next ones are
# counted (services/common/incidents.py); a request sent again closes it. Drops are also counted in
# the collector's metrics (`on_spans`).
FORWARD_DROPS = "FORWARD_DROPPED"

# OTLP specification, "OTLP/gRPC Response" → Failures: the retryable codes.
RETRYABLE = frozenset({
    grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS,
})


class Forwarder:
    def __init__(self, endpoint: str, *, queue_max: int, timeout_s: float, max_attempts: int):
        if endpoint.startswith("https://"):
            self._channel = grpc.aio.secure_channel(endpoint.removeprefix("https://"), grpc.ssl_channel_credentials(),
                                                    options=RECONNECT_OPTIONS)
        else:
            self._channel = grpc.aio.insecure_channel(endpoint.removeprefix("http://"), options=RECONNECT_OPTIONS)
        self._stub = trace_service_pb2_grpc.TraceServiceStub(self._channel)
        self._queue: asyncio.Queue[trace_service_pb2.ExportTraceServiceRequest] = asyncio.Queue(queue_max)
        self._timeout_s = timeout_s
        self._attempts = max_attempts
        self.sent = 0
        self.dropped = 0
        # Optional `(outcome, spans)` hook, outcome `sent` | `dropped` (the collector's metrics).
        self.on_spans: Callable[[str, int], None] | None = None
        self._task = asyncio.create_task(self._run(), name="otlp-forwarder")

    def submit(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        """Queue `request` for the downstream; never blocks (drops the oldest when full)."""
        if self._queue.full():
            oldest = self._queue.get_nowait()
            self._queue.task_done()
            self.dropped += 1
            self._count("dropped", oldest)
            INCIDENTS.failure(FORWARD_DROPS, f"forward queue full: dropped the oldest request ({self.dropped} dropped so far)")
        self._queue.put_nowait(request)

    async def _send(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        delay = 0.2
        for attempt in range(1, self._attempts + 1):
            try:
                await self._stub.Export(request, timeout=self._timeout_s, compression=grpc.Compression.Gzip)
                self.sent += 1
                self._count("sent", request)
                INCIDENTS.resolved(FORWARD_DROPS)
                return
            except grpc.aio.AioRpcError as e:
                if e.code() not in RETRYABLE or attempt == self._attempts:
                    self.dropped += 1
                    self._count("dropped", request)
                    INCIDENTS.failure(FORWARD_DROPS, f"forwarding to downstream failed ({e.code().name}): request dropped"
                                      f" ({self.dropped} dropped so far)")
                    return
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 30.0)

    @property
    def queued(self) -> int:
        """Requests waiting to be sent."""
        return self._queue.qsize()

    def _count(self, outcome: str, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        if self.on_spans is not None:
            self.on_spans(outcome, sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans))

    async def _run(self) -> None:
        while True:
            req = await self._queue.get()
            try:
                await self._send(req)
            finally:
                self._queue.task_done()

    async def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (up to `timeout_s`), then stop and close the channel."""
        try:
            await asyncio.wait_for(self._queue.join(), timeout_s)
        except TimeoutError:
            log.warning("forwarder closing with %d request(s) unsent", self._queue.qsize())
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._channel.close()
