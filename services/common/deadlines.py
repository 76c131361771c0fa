"""The caller's deadline, carried into every call a service makes on the caller's behalf.

`ServiceInterceptor` records each RPC's deadline (monotonic clock) in a context variable when the
call starts; a client of another service asks `timeout(cap_s)` for the seconds its own call may take:
the caller's remaining time when that is shorter than the cap, the cap when the caller set none. So a
caller that gives up after 1 s never leaves a 5 s call to the chat service running behind it.
`reserved(cap_s, remaining_s)` is the same less a reserve for answering: what a wait may take when
its failure must still reach the caller as a status of ours (the agent call, every database wait)
rather than the caller's own DEADLINE_EXCEEDED.
"""
from __future__ import annotations

import time
from contextvars import ContextVar, Token

import grpc

# grpc-python reports "no deadline" as a remaining time this large (or None).
NO_DEADLINE_S = 10**7
# The smallest timeout handed to a call: an expired caller still gets a real DEADLINE_EXCEEDED.
MIN_TIMEOUT_S = 0.001

# Share of the caller's remaining time kept for answering (bounded below and above, in seconds), so
# that when a wait on the caller's behalf runs out the service can still say why before the caller
# gives up (Envoy's grpc_timeout_header_offset is the same idea). The caller is often another service
# of ours waiting with its own timer: feedback asks chat with a 2 s deadline (chat_timeout_s), chat's
# database waits end at 2 s less this, and chat's DATABASE_UNAVAILABLE must reach feedback before its
# 2 s run out, or feedback can only say CHAT_UNAVAILABLE (issue 25). Measured with PostgreSQL frozen
# under 37 concurrent calls at load 24 on 2 cores (tests/ops/test_database_freeze.py): answers arrived
# up to 0.36 s after the wait ended, past the 0.2 s a 10 % reserve left; 25 % leaves 0.5 s of 2 s.
RESERVE_FRACTION = 0.25
RESERVE_MIN_S = 0.05
RESERVE_MAX_S = 1.0

_deadline: ContextVar[float | None] = ContextVar("agentfeedback_caller_deadline", default=None)


def caller_remaining(context: grpc.aio.ServicerContext) -> float | None:
    """Seconds left of the caller's deadline, None when the caller set none."""
    r = context.time_remaining()
    return None if r is None or r > NO_DEADLINE_S else max(0.0, r)


def at(remaining_s: float | None) -> float | None:
    """The deadline `remaining_s` seconds from now on the monotonic clock (None stays None)."""
    return None if remaining_s is None else time.monotonic() + remaining_s


def left(deadline: float | None) -> float | None:
    """Seconds until `deadline` (monotonic; negative once passed), None for no deadline."""
    return None if deadline is None else deadline - time.monotonic()


def enter(context: grpc.aio.ServicerContext) -> Token:
    """Record the current RPC's deadline for the calls made while handling it (ServiceInterceptor)."""
    return _deadline.set(at(caller_remaining(context)))


def leave(token: Token) -> None:
    _deadline.reset(token)


def remaining() -> float | None:
    """Seconds left of the deadline of the RPC being handled, None when it has none (or outside one)."""
    return left(_deadline.get())


def timeout(cap_s: float, remaining_s: float | None = None) -> float:
    """Seconds a call on the caller's behalf may take: `cap_s`, or less when the caller's remaining
    time (`remaining_s`, else that of the RPC being handled) is shorter; never below 1 ms."""
    r = remaining() if remaining_s is None else remaining_s
    return cap_s if r is None else max(MIN_TIMEOUT_S, min(cap_s, r))


def reserved(cap_s: float, remaining_s: float | None = None) -> float:
    """Seconds a wait on the caller's behalf may take and still leave time to answer: the caller's
    remaining time (`remaining_s`, else that of the RPC being handled) less 25 % of it (between 50 ms
    and 1 s: RESERVE_*), at most `cap_s`; `cap_s` when the caller set no deadline; never below 1 ms."""
    r = remaining() if remaining_s is None else remaining_s
    if r is None:
        return cap_s
    reserve = min(RESERVE_MAX_S, max(RESERVE_MIN_S, RESERVE_FRACTION * r))
    return max(MIN_TIMEOUT_S, min(cap_s, r - reserve))
