"""OTLP/gRPC receivers (default port 4317): `opentelemetry.proto.collector.trace.v1.TraceService/Export`
and, on the same server, `opentelemetry.proto.collector.logs.v1.LogsService/Export` (evaluation events
as log records, logs.py; every other log record is answered OK and not stored).

No JWT (OTLP exporters send none) and never traced (the collector does not export its own Export
handling to itself). With `otlp_bearer_tokens` set, a call without `authorization: Bearer <an accepted
token>` is UNAUTHENTICATED before it reaches these servicers (ingest_auth.TokenInterceptor). Behaviour, per the OTLP specification (opentelemetry-proto
`docs/specification.md`, "OTLP/gRPC Response" and "Throttling"):
- OK with `partial_success` unset: every span stored (an empty request included).
- OK with `partial_success.rejected_spans` + `error_message`: bad spans rejected, the rest stored
  (logs: `rejected_log_records`, evaluation events that can never become ratings).
- RESOURCE_EXHAUSTED: the message exceeds 4 MiB after decompression (enforced by grpc itself
  through `grpc.max_receive_message_length`; nothing is stored, the client must not retry).
- UNAVAILABLE + google.rpc.RetryInfo: the write queue (logs: the evaluations awaiting commit) is full,
  or the database failed; nothing of the request is acknowledged, the client retries (a retry is
  de-duplicated at read time; an evaluation by its outbox key).
gzip request compression is handled by grpc (`grpc-encoding: gzip`).
"""
from __future__ import annotations

import logging

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from services.common.depfail import database_unavailable, is_database_down
from services.common.errors import Unavailable
from services.tracecollector.ingest import ExportResult, Ingestor
from services.tracecollector.logs import LogsIngestor
from services.tracecollector.writer import Overloaded

log = logging.getLogger(__name__)

SERVICE_NAME = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE_NAME = "opentelemetry.proto.collector.logs.v1.LogsService"
# For the ServiceInterceptor: no JWT, no span (ingest_auth.TokenInterceptor checks the ingest token, if any).
PUBLIC_PREFIX = f"/{SERVICE_NAME}/"
PUBLIC_PREFIXES = (PUBLIC_PREFIX, f"/{LOGS_SERVICE_NAME}/")


def _with_partial_success(resp, rejected_field: str, result: ExportResult):
    """`resp` with `partial_success` (`rejected_field` + `error_message`) set only when something was
    rejected, or with 0 rejected and the message when the export was accepted with a warning (OTLP
    "Partial Success": an unset one means full success)."""
    if result.rejected or result.error_message:
        setattr(resp.partial_success, rejected_field, result.rejected)
        resp.partial_success.error_message = result.error_message
    return resp


def export_response(result: ExportResult) -> trace_service_pb2.ExportTraceServiceResponse:
    """The OTLP traces response."""
    return _with_partial_success(trace_service_pb2.ExportTraceServiceResponse(), "rejected_spans", result)


def logs_response(result: ExportResult) -> logs_service_pb2.ExportLogsServiceResponse:
    """The OTLP logs response (`rejected_log_records`)."""
    return _with_partial_success(logs_service_pb2.ExportLogsServiceResponse(), "rejected_log_records", result)


def failure(err: Exception, retry_after_s: float, what: str = "spans") -> Unavailable:
    """The retryable error an Export answers when its `what` (spans | evaluations) were not stored."""
    if isinstance(err, Overloaded):
        return Unavailable(str(err), retry_after_s=err.retry_after_s, reason="COLLECTOR_OVERLOADED")
    if is_database_down(err) or (err.__cause__ is not None and is_database_down(err.__cause__)):
        return database_unavailable()
    return Unavailable(f"{what} could not be stored; retry later", retry_after_s=retry_after_s,
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


class LogsServiceServicer(logs_service_pb2_grpc.LogsServiceServicer):
    """Thin: the request goes to `LogsIngestor.export`; the answer is sent after the evaluations commit."""

    def __init__(self, ingestor: LogsIngestor, retry_after_s: float):
        self._ingestor = ingestor
        self._retry_after_s = retry_after_s

    async def Export(self, request, context: grpc.aio.ServicerContext):
        """Keep the request's evaluation events; answer after commit. Raises Unavailable (with RetryInfo)
        when they could not be stored."""
        try:
            result = await self._ingestor.export(request)
        except Overloaded as e:
            raise failure(e, self._retry_after_s, "evaluations") from None
        except Exception as e:
            if not is_database_down(e):
                log.exception("logs Export failed")
            raise failure(e, self._retry_after_s, "evaluations") from None
        return logs_response(result)
