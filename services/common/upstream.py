"""Statuses answered by another service, mapped by what they mean (not all to "unreachable").

`from_upstream(err, dependency)` is the DomainError this service answers when a call to `dependency`
(`chat`, `traces`, …) failed with `err`, for the codes a client did not handle itself:
- no answer (`depfail.no_answer`: UNAVAILABLE / DEADLINE_EXCEEDED, or a stream that broke before the
  status came: UNKNOWN / INTERNAL / CANCELLED made up by gRPC, without our status details) →
  UNAVAILABLE `<DEPENDENCY>_UNAVAILABLE` + RetryInfo;
- RESOURCE_EXHAUSTED → RESOURCE_EXHAUSTED `<DEPENDENCY>_RESOURCE_EXHAUSTED` (it is overloaded);
- UNAUTHENTICATED / PERMISSION_DENIED → the same code (the caller's token was refused there);
- FAILED_PRECONDITION / ABORTED / NOT_FOUND / INVALID_ARGUMENT → the same code, reason `<DEPENDENCY>_<CODE>`;
- INTERNAL, UNKNOWN (answered by the dependency), DATA_LOSS, UNIMPLEMENTED and the rest → INTERNAL
  `<DEPENDENCY>_FAILED`: the dependency answered, it failed; retrying the same call is not expected to help.
The upstream's ErrorInfo reason rides along as metadata `upstream_reason`; its message is not copied.
`upstream_detail(err)` is the text of a failed call that may be kept or shown (a turn's failure, a
log line): the upstream's own message when one of our services answered, never gRPC's own text.
"""
from __future__ import annotations

import grpc

from services.common.clip import clip
from services.common.depfail import no_answer, upstream_unavailable
from services.common.errors import DomainError, error_info, status_details

_PASS_THROUGH = frozenset({
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
})


def from_upstream(err: grpc.aio.AioRpcError, dependency: str) -> DomainError:
    """The error to answer for `err` from `dependency` (see the module docstring)."""
    code = err.code()
    md: dict[str, str] = {"dependency": dependency}
    try:
        info = error_info(err)
    except Exception:  # noqa: BLE001 - a malformed status detail is no reason to fail differently
        info = None
    if info is not None and info.reason:
        md["upstream_reason"] = info.reason[:64]
    if no_answer(err):
        return upstream_unavailable(dependency, code, **{k: v for k, v in md.items() if k != "dependency"})
    if code in _PASS_THROUGH:
        return DomainError(message=f"the {dependency} service answered {code.name}", code=code,
                           reason=f"{dependency.upper()}_{code.name}", metadata=md)
    return DomainError(message=f"the {dependency} service failed ({code.name})", code=grpc.StatusCode.INTERNAL,
                       reason=f"{dependency.upper()}_FAILED", metadata=md)


def upstream_detail(err: grpc.aio.AioRpcError, max_chars: int = 300) -> str:
    """`CODE: message` of a failed call, the message only when the upstream wrote it: a status our
    services answer carries google.rpc.Status details (ErrorInfo at least); one gRPC made up itself
    (no connection, deadline) does not, and its text names addresses, ports and subchannel states
    ("connections to all backends failing; last error: … ipv4:127.0.0.1:…"), which no client or
    stored turn should show. Then: `CODE: no answer`."""
    code = err.code().name
    try:
        ours = bool(status_details(err))
    except Exception:  # noqa: BLE001 - a malformed status detail: not a message we wrote
        ours = False
    return f"{code}: {clip(err.details() or '', max_chars)}" if ours else f"{code}: no answer"
