"""Statuses answered by another service, mapped by what they mean (not all to "unreachable").

`from_upstream(err, dependency)` is the DomainError this service answers when a call to `dependency`
(`chat`, `traces`, …) failed with `err`, for the codes a client did not handle itself:
- UNAVAILABLE / DEADLINE_EXCEEDED → UNAVAILABLE `<DEPENDENCY>_UNAVAILABLE` + RetryInfo;
- RESOURCE_EXHAUSTED → RESOURCE_EXHAUSTED `<DEPENDENCY>_RESOURCE_EXHAUSTED` (it is overloaded);
- UNAUTHENTICATED / PERMISSION_DENIED → the same code (the caller's token was refused there);
- FAILED_PRECONDITION / ABORTED / NOT_FOUND / INVALID_ARGUMENT → the same code, reason `<DEPENDENCY>_<CODE>`;
- INTERNAL, UNKNOWN, DATA_LOSS, UNIMPLEMENTED and the rest → INTERNAL `<DEPENDENCY>_FAILED`: the
  dependency answered, it failed; retrying the same call is not expected to help.
The upstream's ErrorInfo reason rides along as metadata `upstream_reason`; its message is not copied.
"""
from __future__ import annotations

import grpc

from services.common.depfail import upstream_unavailable
from services.common.errors import DomainError, error_info

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
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return upstream_unavailable(dependency, code, **{k: v for k, v in md.items() if k != "dependency"})
    if code in _PASS_THROUGH:
        return DomainError(message=f"the {dependency} service answered {code.name}", code=code,
                           reason=f"{dependency.upper()}_{code.name}", metadata=md)
    return DomainError(message=f"the {dependency} service failed ({code.name})", code=grpc.StatusCode.INTERNAL,
                       reason=f"{dependency.upper()}_FAILED", metadata=md)
