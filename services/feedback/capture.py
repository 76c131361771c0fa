"""The background worker that freezes a turn's spans into its feedback rows, and replaces client
snapshots with the authoritative one once the chat service answers again.

The work lives in the database, not in memory: PENDING rows (`trace_state = 1`) with a due
`next_capture_at`, and client-snapshot rows with a due `refresh_at`. Each pass claims a batch with
`FOR UPDATE SKIP LOCKED` and leases it (pushes the due time forward), so several replicas share the
queue, a crashed worker's rows come back after the lease, and no connection is held while the
collector or the chat service is called. State rules: `evidence.decide_capture`, `domain.capture_plan`.

Credentials (design choice): the worker has no user token. Towards the collector it presents
`settings.service_token`, or a token it mints from the HS256 secret with sub `svc:feedback` and
scope `traces:read`. To refresh a client snapshot it needs the owner's view of the chat service: with
the HS256 secret it mints a short-lived (5 min) on-behalf-of token for the row's owner with scope
`chat` only; with RS256/JWKS (no secret here) the anchor cannot be verified: the CLIENT snapshot stays and the
row's spans are never frozen (UNAVAILABLE). Spans are only ever copied into rows whose anchor the
chat service confirmed for the row's owner (CLIENT rows are not in the capture queue).

`feedback.created`: a CLIENT row gets its span event here, once the chat service has verified its
anchor (the trace id is then authoritative); the verifying UPDATE marks it emitted in the row, so a
restarted or second worker never emits it again. An unverified row never gets one.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable

import grpc
from opentelemetry import trace

from services.common import ledger
from services.common.errors import DomainError, NotFound
from services.common.worker_loop import WorkerLoop
from services.feedback import domain, evidence
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.events import emit_created
from services.feedback.model.capture import CaptureJob, VerifyJob
from services.feedback.model.enums import TraceState
from services.feedback.model.report import Anchor
from services.feedback.repository.capture import CaptureStore
from services.feedback.settings import FeedbackSettings
from services.feedback.traces_client import TracesClient, TracesUnreachable

# What the chat service answers when the anchor is not (or no longer) the owner's.
_ANCHOR_GONE = frozenset({grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT})

log = logging.getLogger(__name__)

BATCH = 32
# A claimed row comes back to the queue after this many seconds if its worker died mid-way.
LEASE_S = 30.0


class CaptureWorker:
    """`start()` runs the loop in a task; `wake()` makes it look now; `stop()` ends it."""

    def __init__(
        self,
        repo: CaptureStore,
        traces: TracesClient,
        chat: ChatClient,
        settings: FeedbackSettings,
        owner_token: Callable[[str], str | None],
        clock: Callable[[], dt.datetime] | None = None,
        tracer: trace.Tracer | None = None,
    ):
        """tracer: emits `feedback.created` for verified CLIENT rows (None: the global tracer)."""
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._tracer = tracer or trace.get_tracer("agentfeedback.feedback")
        self._repo = repo
        self._traces = traces
        self._chat = chat
        self._s = settings
        self._owner_token = owner_token
        self._worker = WorkerLoop(self._pass, name="feedback-capture", poll_s=settings.capture_poll_s, log=log,
                                  failure="capture pass failed")
        self._next_prune = 0.0  # time.monotonic() of the request ledger's next prune
        # time.monotonic() before which this replica claims no client snapshot (chat unreachable).
        self._refresh_paused_until = 0.0
        # Called after a pass that handled rows (the change feed's wake-up: feed_wakeups.FeedWakeups.poke).
        self.on_written: Callable[[], None] | None = None

    def start(self) -> None:
        """Run the worker in a task."""
        self._worker.start()

    def wake(self) -> None:
        """Look at the queue now, not at the next `capture_poll_s` poll."""
        self._worker.wake()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Let the pass in flight finish (its rows get their next due time instead of waiting out the
        lease), at most `timeout_s`; then cancel."""
        await self._worker.stop(timeout_s)

    async def _pass(self) -> bool:
        """The request ledger's prune when due (its one policy: hourly, 24 h), then `run_once`: True
        when it handled a full batch."""
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + ledger.PRUNE_INTERVAL_S
            await self._repo.prune_requests(ledger.RETENTION_S)
        busy = await self.run_once()
        if busy and self.on_written is not None:
            self.on_written()
        return busy >= BATCH

    async def run_once(self) -> int:
        """One pass: refresh due client snapshots, then look at due PENDING rows. Returns rows handled.

        A replica that cannot reach the chat service hands the snapshots it claimed straight back
        (due now, for a replica that can) and claims none for `4 × capture_backoff_s` seconds: one
        replica with a broken route to chat never holds up the verification the others can do."""
        n = 0
        if time.monotonic() >= self._refresh_paused_until:
            claimed = await self._repo.claim_refresh(BATCH, LEASE_S)
            for i, row in enumerate(claimed):
                if not await self._refresh(row):
                    pause_s = self._s.capture_backoff_s * 4
                    self._refresh_paused_until = time.monotonic() + pause_s
                    await self._repo.refresh_release([r.id for r in claimed[i:]])
                    log.warning("chat service unreachable: %d client snapshot(s) handed back; none claimed for %.0f s",
                                len(claimed) - i, pause_s)
                    break
                n += 1
        rows = await self._repo.claim_capture(BATCH, LEASE_S)
        by_trace: dict[str, list[CaptureJob]] = {}
        for r in rows:
            by_trace.setdefault(r.trace_id, []).append(r)
        # One look at the collector per trace, however many reports point at the turn.
        await asyncio.gather(*(self._capture(trace_id, group) for trace_id, group in by_trace.items()))
        return n + len(rows)

    async def _capture(self, trace_id: str, jobs: list[CaptureJob]) -> None:
        now = self._clock()
        try:
            collected = await self._traces.get_trace(trace_id)
            failure = None
        except TracesUnreachable as e:
            collected, failure = None, e
        spans = None if collected is None else collected.spans
        cut = 0 if collected is None else collected.truncated_value_count
        settled: set[str] = set()  # owners whose rows of this trace were all settled at once
        for job in jobs:
            if job.owner in settled:
                continue
            recheck = job.state == TraceState.CAPTURED  # a copy frozen incomplete, looked at again
            if failure is not None:
                if recheck:
                    await self._repo.capture_recheck(job.id, self._s.capture_settle_s)
                elif job.attempts >= self._s.capture_max_attempts or failure.permanent:
                    if failure.permanent:  # retrying cannot help (a refused token): say so, once per row
                        log.error("collector refused the look for feedback %s: %s; trace snapshot UNAVAILABLE",
                                  job.id, failure)
                    await self._repo.capture_done(job.id, TraceState.UNAVAILABLE, None, -1)
                else:
                    log.warning("collector unreachable for feedback %s (attempt %d): %s", job.id, job.attempts,
                                failure)
                    await self._repo.capture_pending(
                        job.id, evidence.backoff_s(job.attempts, self._s.capture_backoff_s), job.span_count)
                continue
            age_s = (now - job.turn_time).total_seconds() if job.turn_time else None
            d = evidence.decide_capture(
                spans, previous_count=job.span_count, attempts=job.attempts,
                max_attempts=self._s.capture_max_attempts, base_backoff_s=self._s.capture_backoff_s,
                expired=domain.spans_expired(job.turn_time, now, self._s.trace_retention_days),
                settle_in_s=None if age_s is None else self._s.capture_settle_s - age_s, recheck=recheck,
                recheck_window_over=age_s is None or age_s > self._s.capture_complete_window_s,
                recheck_every_s=self._s.capture_settle_s, truncated_value_count=cut,
            )
            if d.state == TraceState.PENDING:
                await self._repo.capture_pending(job.id, d.retry_in_s, d.span_count)
            elif recheck and d.frozen is None:
                await self._repo.capture_recheck(job.id, d.recheck_in_s)
            elif d.state in (TraceState.CAPTURED, TraceState.EXPIRED):
                n = await self._repo.capture_done_trace(job.owner, trace_id, d.state, d.frozen, d.span_count,
                                                        d.recheck_in_s)
                settled.add(job.owner)
                note = f", incomplete (missing {', '.join(d.frozen.missing)})" if d.frozen and d.frozen.missing else ""
                if d.frozen and d.frozen.truncated_value_count:
                    note += f", {d.frozen.truncated_value_count} attribute values cut by the collector's answer budget"
                log.info("trace %s: %s for %d report(s) after %d attempts%s", trace_id, d.state.name, n, job.attempts,
                         note)
            else:
                await self._repo.capture_done(job.id, d.state, d.frozen, d.span_count)
                log.info("feedback %s trace %s: %s after %d attempts", job.id, trace_id, d.state.name, job.attempts)

    async def _refresh(self, job: VerifyJob) -> bool:
        """Verify a CLIENT row's anchor with the chat service as its owner (authoritative). False when
        the chat service cannot be reached (the row is left as claimed: the caller hands it back).

        Confirmed → the chat service's snapshot replaces the client's, capture becomes due, and the
        row's one `feedback.created` event goes to the now authoritative trace (marked in that update).
        NOT_FOUND (or any refusal) for the owner → the words stay, the snapshot is marked unverified,
        the trace snapshot becomes UNAVAILABLE and no span is ever copied into the row (a client
        cannot point its report at another owner's turn and read its tool calls). No way to mint the
        owner's token (RS256) → the same, without the unverified mark (nothing was checked)."""
        token = self._owner_token(job.owner)
        if token is None:
            await self._repo.refresh_give_up(job.id, not_found=False)
            return True
        md = (("authorization", f"Bearer {token}"),)
        a = job.anchor
        try:
            if a.message:
                target = await self._chat.get_message(a.message, md)
                turn = await self._chat.list_turn(domain.instance_of(target.name), md, trace_id=target.trace_id)
            else:
                if not (a.instance and a.trace_id):
                    raise NotFound(f"feedback {job.id} anchor")
                turn = await self._chat.list_turn(a.instance, md, trace_id=a.trace_id)
                picked = domain.pick_target(turn)
                if picked is None:
                    raise NotFound(f"{a.instance} turn {a.trace_id}")
                target = picked
        except ChatUnreachable:
            return False
        except DomainError as e:
            if e.code not in _ANCHOR_GONE:  # chat failed or refused for another reason: try again later
                return False
            log.warning("feedback %s: anchor not found for its owner; client snapshot kept unverified", job.id)
            await self._repo.refresh_give_up(job.id, not_found=True)
            return True
        snap = domain.build_snapshot(target, turn)
        plan = domain.capture_plan(snap.source, target.trace_id)
        verified = Anchor(kind=a.kind, message=target.name, instance=domain.instance_of(target.name),
                          trace_id=target.trace_id)
        event = await self._repo.refresh_done(job.id, snap, plan.trace_state, plan.capture_due, plan.authoritative,
                                              target.create_time, verified)
        if event is not None:
            emit_created(self._tracer, event)
        self.wake()
        return True
