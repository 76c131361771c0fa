"""OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export` (default port 4317).

Public (OTLP exporters send no bearer token) and never traced (the collector does not export its
own Export handling to itself). Behaviour, per the OTLP specification (opentelemetry-proto
`docs/specification.md`, "OTLP/gRPC Response" and "Throttling"):
- OK with `partial_success` unset: every span stored (an empty request included).
- OK with `partial_success.rejected_spans` + `error_message`: bad spans rejected, the rest stored.
- RESOURCE_EXHAUSTED: the message exceeds 4 MiB after decompression (enforced by grpc itself
  through `grpc.max_receive_message_length`; nothing is stored, the client must not retry).
- UNAVAILABLE + google.rpc.RetryInfo: the write queue is full, or the database failed; nothing of
  the request is acknowledged, the client retries (a retry is de-duplicated at read time).
gzip request compression is handled by grpc (`grpc-encoding: gzip`).
"""
from __future__ import annotations

import logging

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from services.common.depfail import database_unavailable, is_database_down
from services.common.errors import Unavailable
from services.tracecollector.ingest import ExportResult, Ingestor
from services.tracecollector.writer import Overloaded

log = logging.getLogger(__name__)

SERVICE_NAME = "opentelemetry.proto.collector.trace.v1.TraceService"
# For the ServiceInterceptor: no token, no span.
PUBLIC_PREFIX = f"/{SERVICE_NAME}/"


def export_response(result: ExportResult) -> trace_service_pb2.ExportTraceServiceResponse:
    """The OTLP response: `partial_success` set only when something was rejected."""
    resp = trace_service_pb2.ExportTraceServiceResponse()
    if result.rejected:
        resp.partial_success.rejected_spans = result.rejected
        resp.partial_success.error_message = result.error_message
    return resp


def failure(err: Exception, retry_after_s: float) -> Unavailable:
    """The retryable error an Export answers when its spans were not stored."""
    if isinstance(err, Overloaded):
        return Unavailable(str(err), retry_after_s=err.retry_after_s, reason="COLLECTOR_OVERLOADED")
    if is_database_down(err) or (err.__cause__ is not None and is_database_down(err.__cause__)):
        return database_unavailable()
    return Unavailable("spans could not be stored; retry later", retry_after_s=retry_after_s,
                       reason="STORAGE_UNAVAILABLE")


class TraceServiceServicer(trace_service_pb2_grpc.TraceServiceServicer):
    """Thin: the request goes to `Ingestor.export`; the answer is sent after commit."""

    def __init__(self, ingestor: Ingestor, retry_after_s: float):
        self._ingestor = ingestor
        self._retry_after_s = retry_after_s

    async def Export(self, request, context: grpc.aio.ServicerContext):
        """Store the request's valid spans; answer after commit. Raises Unavailable (with RetryInfo; the
        ServiceInterceptor maps it) when they could not be stored."""
        try:
            result = await self._ingestor.export(request)
        except Overloaded as e:
            raise failure(e, self._retry_after_s) from None
        except Exception as e:
            if not (e.__cause__ is not None and is_database_down(e.__cause__)):  # else counted by the writer
                log.exception("Export failed")
            raise failure(e, self._retry_after_s) from None
        return export_response(result)
