"""Dependency failures → UNAVAILABLE + RetryInfo + ErrorInfo naming the dependency (the one mapping).

`dependency_error(err)` classifies an exception **by type** (never by its message text):
- asyncpg's connection classes (`PostgresConnectionError`: connection refused, lost mid-query,
  rejected; `OperatorInterventionError`: admin shutdown, crash, "cannot connect now" while starting
  or stopping; `TooManyConnectionsError`; `InternalClientError`, what a connection closed by the
  server mid-statement raises), and any `OSError` raised inside asyncpg (the socket is
  missing: `FileNotFoundError`; `ConnectionRefusedError`; a connect `TimeoutError`; a pool acquire
  that timed out), and `DatabaseTimeout` (a statement past its bound, services/common/db.py)
  → `Unavailable(reason="DATABASE_UNAVAILABLE", metadata dependency=postgresql)`;
- a `grpc.aio.AioRpcError` UNAVAILABLE / DEADLINE_EXCEEDED from a call to another service that no
  client mapped → `UPSTREAM_UNAVAILABLE`; any other `ConnectionError` → `DEPENDENCY_UNAVAILABLE`;
- anything else → None (a bug: the caller answers INTERNAL with the trace id).
`services.common.server.ServiceInterceptor` applies it to every RPC of every service; the chat turn
applies it too, so a failed turn's UNAVAILABLE still names its trace id.
"""
from __future__ import annotations

import asyncpg
import grpc

from services.common.errors import Aborted, Unavailable

# Seconds a client should wait before retrying (google.rpc.RetryInfo): the health probe notices a
# returning database within 0.25 s and reconnecting takes milliseconds, so 1 s is never too short.
RETRY_AFTER_S = 1.0

class DatabaseTimeout(TimeoutError):
    """No answer from PostgreSQL within a bounded wait (a statement, a pool acquire): the server is
    frozen, overloaded or unreachable (services/common/db.py bounds every wait)."""


DATABASE_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseTimeout,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.TooManyConnectionsError,
    # Raised by a connection the server closed while a statement was being sent ("cannot switch to
    # state …; another operation is in progress"): a fresh connection is the remedy, so a retry helps.
    asyncpg.exceptions.InternalClientError,
)

_UPSTREAM_DOWN = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def _raised_in(err: BaseException, package: str) -> bool:
    """True when a frame of `err`'s traceback runs code of `package` (by module name)."""
    tb = err.__traceback__
    prefix = package + "."
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        if name == package or name.startswith(prefix):
            return True
        tb = tb.tb_next
    return False


def is_database_down(err: BaseException) -> bool:
    """The error means PostgreSQL is down or unreachable (see the module docstring), by type."""
    if isinstance(err, DATABASE_CONNECTION_ERRORS):
        return True
    return isinstance(err, OSError) and _raised_in(err, "asyncpg")


def database_unavailable(**md: str) -> Unavailable:
    """UNAVAILABLE DATABASE_UNAVAILABLE (RetryInfo 1 s); `md` adds ErrorInfo metadata (e.g. trace_id)."""
    return Unavailable("the database (PostgreSQL) cannot be reached; retry later", retry_after_s=RETRY_AFTER_S,
                       reason="DATABASE_UNAVAILABLE", dependency="postgresql", **md)


def upstream_unavailable(dependency: str, code: grpc.StatusCode, **md: str) -> Unavailable:
    """UNAVAILABLE `<DEPENDENCY>_UNAVAILABLE` for a service that did not answer (`code`: its status)."""
    return Unavailable(f"the {dependency} service cannot be reached ({code.name}); retry later",
                       retry_after_s=RETRY_AFTER_S, reason=f"{dependency.upper()}_UNAVAILABLE",
                       dependency=dependency, **md)


def dependency_error(err: BaseException, **md: str) -> Unavailable | None:
    """The UNAVAILABLE a dependency failure answers, or None when `err` is not one (see module doc)."""
    if is_database_down(err):
        return database_unavailable(**md)
    if isinstance(err, grpc.aio.AioRpcError) and err.code() in _UPSTREAM_DOWN:
        return Unavailable(f"a service this one calls cannot be reached ({err.code().name}); retry later",
                           retry_after_s=RETRY_AFTER_S, reason="UPSTREAM_UNAVAILABLE", **md)
    if isinstance(err, ConnectionError):
        return Unavailable("a dependency cannot be reached; retry later", retry_after_s=RETRY_AFTER_S,
                           reason="DEPENDENCY_UNAVAILABLE", **md)
    cause = err.__cause__ or err.__context__  # e.g. `raise StoreFailed(...) from asyncpg_error`
    if cause is not None and is_database_down(cause):
        return database_unavailable(**md)
    return None


def conflict_error(err: BaseException) -> Aborted | None:
    """ABORTED `TRANSACTION_CONFLICT` when PostgreSQL rolled the RPC's transaction back because of a
    concurrent one (SQLSTATE class 40: `40P01` deadlock_detected, `40001` serialization_failure), else
    None. Nothing of the call was stored, so the whole call may be retried (AIP-194: ABORTED is retried
    at the level of the read-modify-write, here the RPC)."""
    if isinstance(err, asyncpg.exceptions.TransactionRollbackError):
        return Aborted("the write conflicted with a concurrent one and was rolled back; retry the call",
                       reason="TRANSACTION_CONFLICT")
    return None
