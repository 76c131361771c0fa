"""Domain errors and their one mapping to gRPC status (google.rpc.Status + ErrorInfo, AIP-193).

Domain code raises these typed errors (one class per status code the code raises; never a bare
`DomainError(code=…)`); `services.common.server.ServiceInterceptor` converts them in one place.
Every error carries a machine-readable `reason` (UPPER_SNAKE) in ErrorInfo with domain
`agentfeedback.dev`; INVALID_ARGUMENT also carries BadRequest field violations naming the field.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from services.common.clip import clip, clip_message

ERROR_DOMAIN = "agentfeedback.dev"
T = TypeVar("T")
# A google.rpc.Status travels base64-encoded in the `grpc-status-details-bin` trailer; gRPC clients
# refuse trailers over 16 KiB (8 KiB soft): extra details beyond this many bytes are left out.
DETAILS_MAX_BYTES = 6 * 1024


@dataclass
class DomainError(Exception):
    """Base of every error a client may see. `metadata` goes into ErrorInfo (string values)."""

    message: str
    reason: str = "ERROR"
    metadata: dict[str, str] = field(default_factory=dict)
    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    # Extra detail messages packed into google.rpc.Status.details (e.g. the current item on ABORTED).
    details: list[Message] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


class StatusError(DomainError):
    """A DomainError of the class's one `status` code: `(message, reason=<the code's name>, **metadata)`."""

    status: ClassVar[grpc.StatusCode]

    def __init__(self, message: str, reason: str | None = None, **md: str):
        super().__init__(message=message, reason=reason or self.status.name, metadata=dict(md), code=self.status)


class InvalidArgument(DomainError):
    """INVALID_ARGUMENT; `field` is the request field path (e.g. `feedback.body`). `violations`: every
    bad field of the request as (field path, description), this one first (`Violations` builds them);
    each becomes one google.rpc.BadRequest field violation."""

    def __init__(self, field_path: str, description: str, reason: str = "INVALID_ARGUMENT",
                 violations: tuple[tuple[str, str], ...] = (), **md: str):
        others = [v for v in violations if v != (field_path, description)]
        super().__init__(
            message="; ".join(f"{f}: {d}" for f, d in [(field_path, description), *others]),
            reason=reason,
            metadata={"field": field_path, **md},
            code=grpc.StatusCode.INVALID_ARGUMENT,
        )
        self.field_path = field_path
        self.description = description
        self.violations = ((field_path, description), *others)


class Violations:
    """A request's bad fields, gathered so one INVALID_ARGUMENT names every one of them (AIP-193:
    one BadRequest with a violation per field). `check(fn, …)` runs one field's check and returns its
    value, or None after recording its InvalidArgument; `raise_any()` raises them as one error: the
    first's reason and metadata, every violation in request order.

        v = Violations()
        body = v.check(check_body, f.body)
        rid = v.check(parse_request_id, request.request_id, "request_id", required=True)
        v.raise_any()   # nothing below runs on a bad request
    """

    def __init__(self) -> None:
        self.errors: list[InvalidArgument] = []

    def check(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        try:
            return fn(*args, **kwargs)
        except InvalidArgument as e:
            self.errors.append(e)
            return None

    def add(self, field_path: str, description: str) -> None:
        self.errors.append(InvalidArgument(field_path, description))

    def raise_any(self) -> None:
        if not self.errors:
            return
        first = self.errors[0]
        if len(self.errors) == 1:
            raise first
        md = {k: v for k, v in first.metadata.items() if k != "field"}
        raise InvalidArgument(first.field_path, first.description, first.reason,
                              tuple(v for e in self.errors for v in e.violations), **md)


class NotFound(DomainError):
    """NOT_FOUND naming `resource`; `explanation` is appended to the message. `resource_type` (a type
    URL) adds a google.rpc.ResourceInfo naming the resource, with `description` (e.g. why it is gone)."""

    def __init__(self, resource: str, reason: str = "NOT_FOUND", explanation: str = "",
                 resource_type: str = "", description: str = "", **md: str):
        super().__init__(
            message=f"{resource} not found" + (f": {explanation}" if explanation else ""),
            reason=reason,
            metadata={"resource": resource, **md},
            code=grpc.StatusCode.NOT_FOUND,
            details=[error_details_pb2.ResourceInfo(resource_type=resource_type, resource_name=resource,
                                                    description=description)] if resource_type else [],
        )


class AlreadyExists(DomainError):
    def __init__(self, resource: str, reason: str = "ALREADY_EXISTS", **md: str):
        super().__init__(message=f"{resource} already exists", reason=reason, metadata={"resource": resource, **md},
                         code=grpc.StatusCode.ALREADY_EXISTS)


class Unauthenticated(DomainError):
    def __init__(self, message: str = "missing or invalid bearer token"):
        super().__init__(message=message, reason="UNAUTHENTICATED", code=grpc.StatusCode.UNAUTHENTICATED)


class PermissionDenied(DomainError):
    """PERMISSION_DENIED: by default the token lacks `scope`; `message` / `reason` for other refusals."""

    def __init__(self, scope: str, message: str = "", reason: str = "MISSING_SCOPE", **md: str):
        super().__init__(
            message=message or f"token lacks scope {scope!r}",
            reason=reason,
            metadata={"scope": scope, **md},
            code=grpc.StatusCode.PERMISSION_DENIED,
        )


class Aborted(DomainError):
    """ABORTED on an etag/version conflict; `current` (the stored item) rides in the status details."""

    def __init__(self, message: str, current: Message | None = None, reason: str = "ETAG_MISMATCH", **md: str):
        super().__init__(
            message=message,
            reason=reason,
            metadata=dict(md),
            code=grpc.StatusCode.ABORTED,
            details=[current] if current is not None else [],
        )


class FailedPrecondition(StatusError):
    status = grpc.StatusCode.FAILED_PRECONDITION


class OutOfRange(StatusError):
    """OUT_OF_RANGE: a position past what is kept (e.g. a change feed resume token older than retention)."""

    status = grpc.StatusCode.OUT_OF_RANGE


class Unavailable(StatusError):
    """UNAVAILABLE, retryable; `retry_after_s` becomes google.rpc.RetryInfo. `waited`: the server already
    waited out a dependency's timeout before answering, so the answer also carries gRPC's retry pushback
    saying "not at once" and Envoy's no-retry header (`NO_RETRY_PUSHBACK`): a client's gRPC retry
    policy (CLI, MCP, the services' channels: CreateFeedback is safe to repeat) or the gateway's route
    retries would otherwise wait that timeout out again per attempt (4 attempts: 9.4 s for a 2 s chat
    timeout; through Envoy 3: 6.1 s). RetryInfo still tells the caller when to try again."""

    status = grpc.StatusCode.UNAVAILABLE

    def __init__(self, message: str, retry_after_s: float | None = None, reason: str = "UNAVAILABLE",
                 waited: bool = False, **md: str):
        super().__init__(message, reason, **md)
        self.retry_after_s = retry_after_s
        self.waited = waited


# gRFC A6 server pushback (https://github.com/grpc/proposal/blob/master/A6-client-retries.md): a negative
# `grpc-retry-pushback-ms` tells the client's retry policy not to retry this answer.
# Envoy's route retries (the gRPC-web gateway, services/cli/envoy.py: CreateFeedback is retried on
# `unavailable`, 2 retries) do not read it; the one upstream response header Envoy's router takes as
# "do not retry" is `x-envoy-ratelimited` (Envoy docs, router filter, "HTTP response headers consumed
# from upstream": present, whatever its value, the answer is not retried unless the route's retry_on
# has `envoy-ratelimited`, which ours never has). Without it a browser waited 3 × 2 s with chat frozen.
# Our answers are trailers-only (no message sent before the abort), so both reach Envoy in the
# response headers, where its retry decision looks.
NO_RETRY_PUSHBACK = (("grpc-retry-pushback-ms", "-1"), ("x-envoy-ratelimited", "do-not-retry"))


def pushback_trailers(err: Exception) -> tuple[tuple[str, str], ...]:
    """The trailing metadata `err`'s answer carries besides its status: NO_RETRY_PUSHBACK for an
    Unavailable that `waited`, else none."""
    return NO_RETRY_PUSHBACK if isinstance(err, Unavailable) and err.waited else ()


class DeadlineExceeded(StatusError):
    status = grpc.StatusCode.DEADLINE_EXCEEDED


class ResourceExhausted(StatusError):
    """RESOURCE_EXHAUSTED; `retry_after_s` becomes google.rpc.RetryInfo, `quota` ((subject, description)
    pairs) google.rpc.QuotaFailure violations (AIP-193)."""

    status = grpc.StatusCode.RESOURCE_EXHAUSTED

    def __init__(self, message: str, reason: str = "RESOURCE_EXHAUSTED", retry_after_s: float | None = None,
                 quota: tuple[tuple[str, str], ...] = (), **md: str):
        super().__init__(message, reason, **md)
        self.retry_after_s = retry_after_s
        self.quota = quota


class Cancelled(StatusError):
    status = grpc.StatusCode.CANCELLED


class Unimplemented(StatusError):
    status = grpc.StatusCode.UNIMPLEMENTED


class Internal(StatusError):
    """INTERNAL that names what failed (e.g. the agent), never internals."""

    status = grpc.StatusCode.INTERNAL


def _pack(msg: Message) -> any_pb2.Any:
    a = any_pb2.Any()
    a.Pack(msg)
    return a


def to_status(err: DomainError) -> status_pb2.Status:
    """The google.rpc.Status for a domain error: ErrorInfo first, then BadRequest/RetryInfo/QuotaFailure/
    details. Every text that may carry a client value is clipped (`services.common.clip`: message and
    descriptions at 1024 characters, metadata values and field paths at 200), so the status always fits
    in gRPC's trailing metadata and the client sees the real code (never RESOURCE_EXHAUSTED "metadata
    size exceeds hard limit")."""
    st = status_pb2.Status(code=err.code.value[0], message=clip_message(err.message))
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=ERROR_DOMAIN)
    for k, v in err.metadata.items():
        info.metadata[clip(k)] = clip(v)
    st.details.append(_pack(info))
    if isinstance(err, InvalidArgument):
        br = error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=clip(f), description=clip_message(d))
            for f, d in err.violations])
        st.details.append(_pack(br))
    retry_after_s = getattr(err, "retry_after_s", None)
    if isinstance(err, Unavailable | ResourceExhausted) and retry_after_s is not None:
        ri = error_details_pb2.RetryInfo()
        ri.retry_delay.FromNanoseconds(int(retry_after_s * 1e9))
        st.details.append(_pack(ri))
    if isinstance(err, ResourceExhausted) and err.quota:
        qf = error_details_pb2.QuotaFailure(violations=[
            error_details_pb2.QuotaFailure.Violation(subject=clip(s), description=clip_message(d))
            for s, d in err.quota])
        st.details.append(_pack(qf))
    extra = [_pack(d) for d in err.details]
    if sum(a.ByteSize() for a in extra) + st.ByteSize() > DETAILS_MAX_BYTES:
        # The item riding along (e.g. the current report on ABORTED) would not fit in the trailers:
        # say so instead of letting the client see RESOURCE_EXHAUSTED for the metadata.
        info.metadata["details_omitted"] = "too large for gRPC metadata; read the current item with its Get"
        st.details[0].CopyFrom(_pack(info))
        extra = []
    st.details.extend(extra)
    return st


def internal_status(trace_id: str) -> status_pb2.Status:
    """INTERNAL without internals: only the trace id, so an operator can find the log line."""
    st = status_pb2.Status(code=code_pb2.INTERNAL, message=f"internal error (trace_id {trace_id})")
    info = error_details_pb2.ErrorInfo(reason="INTERNAL", domain=ERROR_DOMAIN, metadata={"trace_id": trace_id})
    st.details.append(_pack(info))
    return st


# Client side: the codes of a failed call that another try may turn into a success (gRPC's status code
# guide: UNAVAILABLE first; a deadline, a quota or a conflict may also pass later; INTERNAL/UNKNOWN are
# a server's failure, not the request's). Every other code is permanent: the same call fails the same
# way (a bad token, a missing scope, a bad argument), so retrying it only hides the problem.
TRANSIENT_CODES = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN,
})


# gRPC status → HTTP status of an OTLP/HTTP answer, as the OpenTelemetry Collector's otlpreceiver maps
# them (`GetHTTPStatusCodeFromStatus`; OTLP specification "Failures"): the retryable codes are 503 (429
# for a quota), the others say what the client must fix; anything else is 500.
_HTTP_STATUS = {
    code_pb2.CANCELLED: 503, code_pb2.DEADLINE_EXCEEDED: 503, code_pb2.ABORTED: 503, code_pb2.OUT_OF_RANGE: 503,
    code_pb2.UNAVAILABLE: 503, code_pb2.DATA_LOSS: 503, code_pb2.RESOURCE_EXHAUSTED: 429,
    code_pb2.INVALID_ARGUMENT: 400, code_pb2.UNAUTHENTICATED: 401, code_pb2.PERMISSION_DENIED: 403,
    code_pb2.UNIMPLEMENTED: 404,
}


def http_status(code: int) -> int:
    """The HTTP status of a google.rpc.Status `code` (its number) on an OTLP/HTTP answer."""
    return 200 if code == code_pb2.OK else _HTTP_STATUS.get(code, 500)


def is_transient(code: grpc.StatusCode) -> bool:
    """Client side: True when retrying a call that failed with `code` may succeed (TRANSIENT_CODES)."""
    return code in TRANSIENT_CODES


def error_info(rpc_error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """Client side: the ErrorInfo of a failed call, or None."""
    from grpc_status import rpc_status  # noqa: PLC0415

    st = rpc_status.from_call(rpc_error)  # type: ignore[arg-type]
    if st is None:
        return None
    for d in st.details:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            return info
    return None


def status_details(rpc_error: grpc.RpcError) -> list[any_pb2.Any]:
    """Client side: every detail of a failed call's google.rpc.Status."""
    from grpc_status import rpc_status  # noqa: PLC0415

    st = rpc_status.from_call(rpc_error)  # type: ignore[arg-type]
    return list(st.details) if st is not None else []
