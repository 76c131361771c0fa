"""Per-owner write quota, shared by every replica: GCRA (the generic cell rate algorithm) in PostgreSQL.

Each service counts its own writes (an owner may write 240 times a minute to the chat service and
240 times to the feedback service). Why PostgreSQL: the limit must hold across replicas, and every
service already has it. Why GCRA (issue 25): a fixed one-minute window let a flooder's whole minute
through in the first second of every window (the other owners' latency doubled in those seconds) and
2 × the limit across a boundary. GCRA has no window: one row per owner holds its theoretical arrival
time `tat`; each write moves it on by the emission interval `T = window / limit`, and a write is
allowed while `tat − now ≤ burst × T`. So an owner writes `limit` per window, evenly spaced, after an
initial burst of at most `burst` (default: the limit) once it has been quiet; any window of the
length holds at most burst + limit writes, a steady flood exactly limit, and a refused owner waits
T (0.25 s at 240 a minute), not until a minute ends.

A replica does not ask PostgreSQL for every write: it takes a *lease* of tokens (`_TAKE`, one
statement: grant up to n writes that fit in the burst, move `tat` on by the grant, under the owner's
row lock, so the grants of all replicas together never exceed the rate), one lease of an owner at a
time (concurrent writes of that owner wait for it). A lease is spent locally, valid for as long as
its tokens took to earn (at least 1 s), and grows while the owner keeps spending leases within that
time (1, 2, 4, … up to `lease_cap`, at most limit / 16, 64 and the burst): an owner writing now and
then costs one statement per write; an owner writing fast costs one per lease (issue 17: the
statement per write was a third of a rating's server CPU). What this trades: tokens leased by one
replica and not spent in time are lost, so an owner spreading a burst over R replicas may be refused
after burst − (R − 1) × lease_cap writes, never after more. Other owners' rows are never touched (a
flood costs the flooder, not its neighbours).

`QuotaInterceptor` runs after `ServiceInterceptor` (the principal is known, errors are mapped there):
for the write methods it is given, `WriteQuota.take(owner)` before the handler; over the limit the
handler never runs (nothing stored) and the caller gets RESOURCE_EXHAUSTED, reason
`WRITE_QUOTA_EXCEEDED`, with RetryInfo (seconds until the next write would be allowed) and
QuotaFailure (subject `owner:<sub>`), answered after 1 s (less only within a nearer caller deadline;
RetryInfo then counts from the answer), so a client retrying without a pause floods nobody. `extra`
checks per method run after the rate check. `valid` checks per method run before it: the handler's
own parse of the request (local, no I/O), so a request that is INVALID_ARGUMENT on its face is refused
so at once and spends no token (a burst of bad calls shows what is wrong, not WRITE_QUOTA_EXCEEDED;
refusing it costs us a parse, not a write). The handler reuses what that parse returned (`checked`):
a request is parsed once per call, not here and again in the handler (that cost 23-32 µs a write). A
write refused later by its handler for what only the database knows (NOT_FOUND, ABORTED, a request id
reused for other content, …) has spent its token.

A retry of a write that was acknowledged is not a new write (AIP-155: a client retrying after a lost
response must get its answer): when the quota would refuse a call, the method's `answered(owner,
request)` check (given by the service: "is this request id's answer stored?") is asked first, and a
call it confirms runs without a token — its handler answers from what is stored and writes nothing.
Only refusals pay for that lookup; a call within the quota runs no extra statement.
"""
from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import grpc

from services.common.auth import current_principal
from services.common.clip import clip
from services.common.errors import ResourceExhausted
from services.common.keyed_locks import KeyedLocks

SCHEMA = "quota"
# Seconds a refused write waits before its answer (see QuotaInterceptor._check), and the least
# RetryInfo it then carries (the next write may fit at once: "retry now" is not a RetryInfo).
REFUSAL_DELAY_S = 1.0
MIN_RETRY_AFTER_S = 0.05
# Owners over quota remembered per replica (a bound on memory; forgetting only costs a round trip).
_MAX_REMEMBERED = 10_000
MIGRATIONS = Path(__file__).parent / "quota_migrations"

# $1 owner, $2 emission interval (s per write), $3 burst (writes), $4 scope (the service), $5 tokens
# wanted (≤ $3). The grant is what fits: (now + burst × T − max(tat, now)) / T tokens, at most $5 (a
# small epsilon keeps a float's 2.9999… from costing a token). A refusal (grant 0) leaves `tat`
# alone and returns it, so the caller knows when one token will fit.
_TAKE = """
WITH t AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now_s)
INSERT INTO quota.write_tat AS q (scope, owner, tat, last_grant)
SELECT $4, $1, now_s + $5 * $2::float8, $5 FROM t
ON CONFLICT (scope, owner) DO UPDATE
    SET (tat, last_grant) = (
        SELECT g.base + g.n * $2::float8, g.n
        FROM (SELECT b.base, greatest(0, least($5, floor((b.now_s + $3 * $2::float8 - b.base) / $2::float8 + 1e-9)))::int AS n
              FROM (SELECT greatest(q.tat, t.now_s) AS base, t.now_s FROM t) b) g)
RETURNING last_grant AS granted, tat, (SELECT now_s FROM t) AS now_s
"""
# Largest lease a replica takes (see the module docstring).
MAX_LEASE = 64


class WriteQuota:
    """`limit` writes per owner per `window_s` seconds in `scope` (limit 0: no quota), evenly spaced,
    with bursts of up to `burst` writes (default: the limit) after a quiet time; leased from PostgreSQL
    in grants of at most `lease_cap` tokens (default: limit / 16, between 1 and MAX_LEASE, at most the
    burst)."""

    def __init__(self, pool: asyncpg.Pool, scope: str, limit: int, window_s: float = 60, lease_cap: int | None = None,
                 burst: int | None = None):
        self._pool = pool
        self.scope = scope
        self.limit = limit
        self.window_s = window_s
        self.burst = max(1, limit if not burst else burst)
        self.interval_s = window_s / limit if limit > 0 else 0.0  # GCRA's emission interval T
        cap = max(1, min(MAX_LEASE, limit // 16)) if lease_cap is None else max(1, lease_cap)
        self.lease_cap = min(cap, self.burst)
        # owner → [monotonic time the lease lapses, tokens left, size of the last lease]
        self._leases: dict[str, list] = {}
        # owner → monotonic time its next token fits: other replicas can only move that later, so this
        # replica refuses the rest of a flood without a database round trip (exact, not a guess).
        self._full_until: dict[str, float] = {}
        self._taking = KeyedLocks()  # owner → the one lease request in flight

    async def take(self, owner: str) -> None:
        """Count one write of `owner`. Raises ResourceExhausted (WRITE_QUOTA_EXCEEDED, RetryInfo: when
        the next write fits) when the owner has none left; nothing is counted then."""
        if self.limit <= 0 or self._spend(owner):
            return
        # One lease request per owner at a time on this replica: concurrent writes wait for it and
        # spend what it brought. (Each asking on its own, a burst of N writers reserved N leases of up
        # to lease_cap: the burst filled with one replica's unspent tokens and writers of every
        # replica were refused long before the limit.)
        async with self._taking.hold(owner):
            if self._spend(owner):
                return
            now = time.monotonic()
            lease = self._leases.get(owner)
            # A lease spent before it lapsed: the owner writes fast, the next one is twice as big.
            want = min(self.lease_cap, lease[2] * 2) if lease is not None and now < lease[0] else 1
            row = await self._pool.fetchrow(_TAKE, owner, self.interval_s, self.burst, self.scope, want)
            granted = row["granted"]
            if granted <= 0:
                # The next token fits when tat − now ≤ (burst − 1) × T.
                retry = max(0.05, row["tat"] - (self.burst - 1) * self.interval_s - row["now_s"])
                self._remember(self._full_until, owner, now + retry)
                raise self._over(owner, retry)
            self._remember(self._leases, owner, [now + max(1.0, granted * self.interval_s), granted - 1, want])

    def _spend(self, owner: str) -> bool:
        """One token of `owner`'s lease (True), none left (False); raises while the owner is known refused."""
        now = time.monotonic()
        lease = self._leases.get(owner)
        if lease is not None and now < lease[0] and lease[1] > 0:
            lease[1] -= 1
            return True
        until = self._full_until.get(owner)
        if until is not None:
            if now < until:
                raise self._over(owner, until - now)
            del self._full_until[owner]
        return False

    @staticmethod
    def _remember(d: dict, owner: str, value) -> None:
        if len(d) >= _MAX_REMEMBERED and owner not in d:
            d.clear()  # a bound on memory; forgetting only costs a round trip
        d[owner] = value

    def _over(self, owner: str, retry_after_s: float) -> ResourceExhausted:
        return over_quota(owner, f"{self.limit} writes per {self.window_s:g} s", retry_after_s, "WRITE_QUOTA_EXCEEDED")


def over_quota(owner: str, what: str, retry_after_s: float | None, reason: str) -> ResourceExhausted:
    """The RESOURCE_EXHAUSTED every quota answers with (RetryInfo when waiting helps, QuotaFailure)."""
    return ResourceExhausted(f"quota exceeded for owner {clip(owner)}: {what}", reason=reason,
                             retry_after_s=retry_after_s, quota=((f"owner:{owner}", what),), limit=what)


Check = Callable[[str], Awaitable[None]]
# `(owner, request) → True` when the request is a retry whose answer is stored (it writes nothing).
Answered = Callable[[str, Any], Awaitable[bool]]
# `(request, context) → parsed`: the handler's local parse; raises InvalidArgument (no I/O, no token).
Valid = Callable[[Any, Any], object]
T = TypeVar("T")

# (request, what its `valid` check returned) for the call being served: set by QuotaInterceptor around
# the handler, read by `checked` (each RPC runs in its own task, so its own context).
_CHECKED: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar("agentfeedback_quota_checked",
                                                                                 default=None)
_UNCHECKED = object()  # `_check`'s answer for a method without a valid check


def checked(request: Any, context: Any, parse: Callable[[Any, Any], T]) -> T:
    """`parse(request, context)`, the handler's parse of its request: the result the write quota's
    `valid` check already got for this very request object when it ran one, else parsed now (a method
    without a check, a server without the quota interceptor). Raises what `parse` raises."""
    got = _CHECKED.get()
    if got is not None and got[0] is request:
        return got[1]
    return parse(request, context)


class QuotaInterceptor(grpc.aio.ServerInterceptor):
    """Takes `quota` for each call of `write_methods` (full names `/pkg.Service/Method`), then runs
    `extra[method](owner)` when given; over the quota, a call `answered[method]` confirms as a retry
    of a stored write runs untaxed. `valid[method](request, context)` runs first: an invalid request
    is INVALID_ARGUMENT without taking a token. Place after `ServiceInterceptor` in the server's list."""

    def __init__(self, quota: WriteQuota, write_methods: Iterable[str], extra: dict[str, Check] | None = None,
                 answered: dict[str, Answered] | None = None, valid: dict[str, Valid] | None = None):
        self._quota = quota
        self._methods = frozenset(write_methods)
        self._extra = dict(extra or {})
        self._answered = dict(answered or {})
        self._valid = dict(valid or {})
        self._wrapped: dict[str, tuple[object, object]] = {}

    async def _check(self, checks: tuple[Valid | None, Answered | None, Check | None], request: Any,
                     context: grpc.aio.ServicerContext) -> Any:
        """The method's `checks` (`_checks`): the valid check, the quota, the extra check; returns what
        the valid check parsed (`_UNCHECKED` when the method has none)."""
        owner = current_principal().sub
        valid, answered, extra = checks
        parsed = valid(request, context) if valid is not None else _UNCHECKED
        try:
            await self._quota.take(owner)
        except ResourceExhausted as e:
            if answered is not None and await answered(owner, request):
                return parsed  # a retry of an acknowledged write: its handler answers from what is stored
            # Answer a refused write after REFUSAL_DELAY_S (within the caller's deadline), whatever its
            # RetryInfo, which then says what is left after the hold: a client that ignores RetryInfo and
            # retries at once is slowed to its concurrency per second, so a flood of refusals (and of
            # their `answered` lookups) cannot take the CPU other owners' calls need (tests/bench/
            # bench_quota.py). Holding only until RetryInfo's time, GCRA's 0.25 s at 240 a minute let a
            # flooder's 8 clients send ≈ 30 refused calls a second instead of 8. An owner within a burst
            # is never held; one over its rate still gets the rate (its tokens accrue during the hold).
            left = context.time_remaining()
            delay = min(REFUSAL_DELAY_S, REFUSAL_DELAY_S if left is None else left - 0.05)
            if delay <= 0:
                raise
            await asyncio.sleep(delay)
            if e.retry_after_s is not None:
                e.retry_after_s = max(MIN_RETRY_AFTER_S, e.retry_after_s - delay)
            raise e from None
        if extra is not None:
            await extra(owner)
        return parsed

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method not in self._methods:
            return handler
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        # Looked up once per method, not per call.
        checks = (self._valid.get(method), self._answered.get(method), self._extra.get(method))
        if handler.unary_unary:
            inner = handler.unary_unary

            async def unary(request, context):
                parsed = await self._check(checks, request, context)
                if parsed is _UNCHECKED:
                    return await inner(request, context)
                token = _CHECKED.set((request, parsed))  # the handler's `checked` reads it
                try:
                    return await inner(request, context)
                finally:
                    _CHECKED.reset(token)

            wrapped = grpc.unary_unary_rpc_method_handler(unary, request_deserializer=handler.request_deserializer,
                                                          response_serializer=handler.response_serializer)
        elif handler.unary_stream:
            inner_stream = handler.unary_stream

            async def stream(request, context):
                # A streaming handler parses its request itself (`checked` finds nothing): a stream the
                # client left is closed by grpc from another context, where a reset would fail.
                await self._check(checks, request, context)
                async for item in inner_stream(request, context):
                    yield item

            wrapped = grpc.unary_stream_rpc_method_handler(stream, request_deserializer=handler.request_deserializer,
                                                           response_serializer=handler.response_serializer)
        else:
            return handler
        self._wrapped[method] = (handler, wrapped)
        return wrapped


async def write_quota_interceptor(url: str, pool: asyncpg.Pool, per_minute: int, service: str,
                                  methods: Iterable[str], extra: dict[str, Check] | None = None,
                                  answered: dict[str, Answered] | None = None,
                                  burst: int = 0, valid: dict[str, Valid] | None = None) -> QuotaInterceptor:
    """Applies the quota schema's migrations, then the interceptor for `service`'s write `methods`
    (short names, e.g. `SendMessage`) at `per_minute` writes per owner (0: no rate limit) with bursts
    of `burst` (0: the per-minute limit); `extra`, `answered` and `valid` are keyed by short names too."""
    from services.common.db import migrate  # noqa: PLC0415 - keeps this module importable without a db

    await migrate(url, SCHEMA, MIGRATIONS)
    full = [f"/{service}/{m}" for m in methods]
    return QuotaInterceptor(WriteQuota(pool, service, per_minute, 60, burst=burst), full,
                            {f"/{service}/{m}": c for m, c in (extra or {}).items()},
                            {f"/{service}/{m}": c for m, c in (answered or {}).items()},
                            {f"/{service}/{m}": c for m, c in (valid or {}).items()})
