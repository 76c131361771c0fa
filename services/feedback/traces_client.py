"""Thin client of `agentfeedback.traces.v1.TraceQueryService` for the capture worker.

`get_trace` returns the trace's spans as `evidence.SpanView`s with the count of attribute values the
collector cut to fit its answer (an `evidence.CollectedTrace`), None when the collector holds no span
of it (NOT_FOUND: not arrived yet, or removed by retention — the worker tells the two apart by the
turn's age, `domain.spans_expired`), and raises `TracesUnreachable` on any other failure (marked `permanent` when no retry can help).
"""
from __future__ import annotations

import grpc
from google.protobuf import json_format

from agentfeedback.traces.v1 import traces_pb2, traces_pb2_grpc
from services.common import deadlines
from services.common.depfail import no_answer
from services.common.errors import is_transient
from services.common.upstream import upstream_detail
from services.feedback.evidence import CollectedTrace, SpanEventView, SpanView

_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


class TracesUnreachable(Exception):
    """The collector did not answer the look. `permanent`: it refused it in a way no retry changes
    (e.g. UNAUTHENTICATED: the worker's token is not accepted), `services.common.errors.is_transient`."""

    def __init__(self, message: str, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent


def to_view(s: traces_pb2.Span) -> SpanView:
    return SpanView(
        span_id=s.span_id,
        parent_span_id=s.parent_span_id,
        name=s.name,
        service_name=s.service_name,
        status=_STATUS.get(s.status_code, "UNSET"),
        start_unix_nano=s.start_time_unix_nano,
        end_unix_nano=s.end_time_unix_nano,
        attributes=json_format.MessageToDict(s.attributes),
        events=tuple(
            SpanEventView(e.name, e.time_unix_nano, json_format.MessageToDict(e.attributes)) for e in s.events
        ),
    )


class TracesClient:
    """One per process; `token_source()` returns the bearer token (scope `traces:read`) to use."""

    def __init__(self, channel: grpc.aio.Channel, token_source, timeout_s: float = 5.0):
        self._stub = traces_pb2_grpc.TraceQueryServiceStub(channel)
        self._token = token_source
        self._timeout_s = timeout_s

    async def get_trace(self, trace_id: str) -> CollectedTrace | None:
        md = (("authorization", f"Bearer {self._token()}"),)
        try:
            t = await self._stub.GetTrace(traces_pb2.GetTraceRequest(trace_id=trace_id), metadata=md,
                                          timeout=deadlines.timeout(self._timeout_s))
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise TracesUnreachable(upstream_detail(e), permanent=not (no_answer(e) or is_transient(e.code()))) from None
        return CollectedTrace([to_view(s) for s in t.spans], t.truncated_value_count)
