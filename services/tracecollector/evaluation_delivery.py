"""Delivery of the evaluation outbox to the feedback service (issue 24): at least once, with retries.

One task per collector process: claim up to `batch` due rows (a lease of `lease_s`), send them in one
`FeedbackService.AcceptEvaluations` with the collector's own credential (scope `feedback:evaluations`),
then per outcome: ACCEPTED or REJECTED → deleted (a rejected shape never becomes valid by waiting);
PENDING_TURN (no turn has the trace yet) → due again after a backoff; the call failing (feedback or
chat down, a refused credential) → the whole batch due again after a backoff. Backoff per row:
`retry_first_s` × 2^(attempts − 1), at most `retry_max_s`. Rows first received more than `pending_days`
ago are dropped each pass (counted, logged once per incident). The feedback service is idempotent on
the evaluation's key, so a row delivered twice (a lease that ran out mid-call) is one rating.

Wakes at once after an Export stored evaluations (`wake`), else looks every `poll_s` (rows due later, and
rows other replicas received).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from agentfeedback.feedback.v1 import feedback_pb2 as fpb
from agentfeedback.feedback.v1 import feedback_pb2_grpc

from services.common.depfail import is_database_down
from services.common.incidents import INCIDENTS
from services.tracecollector.evaluation_outbox import Claimed, OutboxStore

log = logging.getLogger(__name__)
DELIVERY_FAILED = "EVALUATION_DELIVERY_FAILED"
EXPIRED = "EVALUATIONS_EXPIRED"
_State = fpb.EvaluationOutcome.State


@dataclass(frozen=True)
class DeliveryPolicy:
    batch: int = 100
    lease_s: float = 30.0
    retry_first_s: float = 1.0
    retry_max_s: float = 60.0
    pending_days: int = 14
    poll_s: float = 1.0
    timeout_s: float = 10.0


def backoff(attempts: int, first_s: float, max_s: float) -> float:
    """Seconds before the next attempt after `attempts` (≥ 1) failed ones."""
    return min(max_s, first_s * 2 ** min(max(attempts - 1, 0), 30))


class EvaluationDelivery:
    """`channel` reaches the FeedbackService; `token()` is the collector's bearer token."""

    def __init__(self, store: OutboxStore, channel: grpc.aio.Channel, token: Callable[[], str], policy: DeliveryPolicy):
        self._store = store
        self._stub = feedback_pb2_grpc.FeedbackServiceStub(channel)
        self._token = token
        self._policy = policy
        self._wake = asyncio.Event()
        self.delivered = 0
        self.pending = 0
        self.expired = 0
        # Optional `(outcome, n)` hook: accepted | rejected | pending | failed | expired (the metrics).
        self.on_outcome: Callable[[str, int], None] | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="evaluation-delivery")

    def wake(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _count(self, outcome: str, n: int) -> None:
        if n and self.on_outcome is not None:
            self.on_outcome(outcome, n)

    async def _run(self) -> None:
        while True:
            try:
                more = await self.run_once()
            except Exception as e:  # noqa: BLE001 - the loop outlives a bad pass; the next one retries
                if is_database_down(e):
                    INCIDENTS.failure("DATABASE_UNAVAILABLE", "evaluation delivery pass failed", e)
                else:
                    log.exception("evaluation delivery pass failed")
                more = False
            if more:
                continue
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self._policy.poll_s)
            except TimeoutError:
                pass

    async def run_once(self) -> bool:
        """One pass: expire, claim, deliver. True when a whole batch was claimed (more may be due)."""
        p = self._policy
        if expired := await self._store.expire(p.pending_days):
            self.expired += expired
            self._count("expired", expired)
            INCIDENTS.failure(EXPIRED, f"dropped {expired} evaluation(s) older than {p.pending_days} days "
                                       "(their turn never appeared or the feedback service never took them)")
        rows = await self._store.claim(p.batch, p.lease_s)
        if not rows:
            return False
        request = fpb.AcceptEvaluationsRequest()
        for r in rows:
            request.evaluations.add().ParseFromString(r.payload)
        try:
            got = await self._stub.AcceptEvaluations(
                request, metadata=(("authorization", f"Bearer {self._token()}"),), timeout=p.timeout_s)
        except grpc.aio.AioRpcError as e:
            INCIDENTS.failure(DELIVERY_FAILED, f"AcceptEvaluations failed ({e.code().name}); "
                                               f"{len(rows)} evaluation(s) kept for a retry")
            await self._store.later([(r, backoff(r.attempts, p.retry_first_s, p.retry_max_s)) for r in rows],
                                    e.code().name)
            self._count("failed", len(rows))
            return False
        INCIDENTS.resolved(DELIVERY_FAILED)
        done: list[Claimed] = []
        waiting: list[tuple[Claimed, float]] = []
        for r, o in zip(rows, got.outcomes, strict=False):
            if o.state == _State.STATE_PENDING_TURN:
                waiting.append((r, backoff(r.attempts, p.retry_first_s, p.retry_max_s)))
            else:
                if o.state == _State.STATE_REJECTED:
                    log.warning("an evaluation was rejected by the feedback service: %s", o.reason[:300])
                    self._count("rejected", 1)
                else:
                    self._count("accepted", 1)
                done.append(r)
        answered = len(got.outcomes)
        waiting += [(r, backoff(r.attempts, p.retry_first_s, p.retry_max_s)) for r in rows[answered:]]
        await self._store.done(done)
        await self._store.later(waiting, "PENDING_TURN")
        self.delivered += len(done)
        self.pending = len(waiting)
        self._count("pending", len(waiting))
        return len(rows) == p.batch
