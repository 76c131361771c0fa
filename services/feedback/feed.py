"""The change feed, the use case (issue 24; docs/architecture.md "The change feed"): WatchFeedback's
stream of every change to reports, ratings (other systems' evaluations included) and triage state, and the feed's retention.

The events are the outbox rows the database's triggers write in each change's own transaction
(migration 0030); a stream reads them in pages after its position, below the safe horizon
(repository/feed.py), so it sees every committed change once it is final, in one order for every reader
and every replica, and never an uncommitted one. Between pages it holds no connection; it waits on the
process's wake-ups (LISTEN/NOTIFY, `feed_wakeups.py`), never a polling loop. Memory per stream is one
page (`page_size` events): gRPC's flow control holds the stream's next `yield` while a slow client reads.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from services.common.auth import SCOPE_FEEDBACK_ADMIN, SCOPE_FEEDBACK_READ, Principal
from services.common.errors import OutOfRange, PermissionDenied, Unavailable
from services.feedback import feed_domain
from services.feedback.audit import Audit
from services.feedback.feed_wakeups import FeedWakeups
from services.feedback.model.enums import EventKind
from services.feedback.model.evaluation import StoredEvaluation
from services.feedback.model.feed import FeedEvent, FeedFilter, Position
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report
from services.feedback.repository.feed import FeedStore

log = logging.getLogger(__name__)
PRUNE_FIRST_DELAY_S = 30.0


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One message of a stream: an event with its resource as it is now (both None after a delete), or
    a heartbeat (`event` None) carrying the stream's position."""

    position: Position
    event: FeedEvent | None = None
    report: Report | None = None
    rating: Rating | None = None
    evaluation: StoredEvaluation | None = None
    # The owner's words may be sent (the caller's own, or an admin with include_text).
    with_text: bool = True
    heartbeat_time: dt.datetime | None = None


class Feed:
    def __init__(self, store: FeedStore, wakeups: FeedWakeups, audit: Audit, *, retention_days: int,
                 heartbeat_s: float, page_size: int, clock: Callable[[], dt.datetime]):
        self._store, self._wakeups, self._audit = store, wakeups, audit
        self._retention = dt.timedelta(days=retention_days)
        self._heartbeat_s, self._page_size, self._clock = heartbeat_s, page_size, clock
        self._pruner: asyncio.Task | None = None
        self._closing = False
        self._inflight: dict[tuple, asyncio.Future] = {}

    async def _shared(self, key: tuple, read: Callable[[], Awaitable[Any]]) -> Any:
        """One read for every stream of this process asking the same thing in the same wake-up generation
        (100 streams with one filter at one position make one query, not 100). A stream joins only a read
        started in its own generation: that read saw every commit announced before the stream looked."""
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.ensure_future(read())
            self._inflight[key] = fut
            fut.add_done_callback(lambda f: (self._inflight.pop(key, None), f.cancelled() or f.exception()))
        return await asyncio.shield(fut)

    def close_streams(self) -> None:
        """End every stream of this replica (it is stopping): each ends UNAVAILABLE, so its client
        resumes with its last token, through another replica."""
        self._closing = True
        self._wakeups.wake()

    @staticmethod
    def scoped(p: Principal, f: FeedFilter, include_text: bool) -> FeedFilter:
        """The filter a caller may use: `feedback:admin` any; `feedback:read` only its own events
        (PERMISSION_DENIED naming feedback:admin for `owner` of another, or `include_text`)."""
        if SCOPE_FEEDBACK_ADMIN in p.scopes:
            return f
        p.require(SCOPE_FEEDBACK_READ)
        if (f.owner and f.owner != p.sub) or include_text:
            raise PermissionDenied(SCOPE_FEEDBACK_ADMIN, "another owner's events and include_text need feedback:admin")
        return FeedFilter(p.sub, f.kind, f.scope, f.aspect)

    async def start(self, resume: Position | None, from_oldest: bool) -> Position:
        """Where a stream starts: after `resume`; else the oldest kept event, or now. OUT_OF_RANGE
        (RESUME_TOKEN_EXPIRED, naming the oldest position still available) when retention has deleted
        events after `resume`."""
        pruned, when = await self._store.feed_pruned()
        if resume is None:
            return pruned if from_oldest else await self._store.feed_horizon()
        if resume < pruned:
            raise OutOfRange(
                f"events after this resume_token are older than the feed's retention ({self._retention.days} days) "
                "and were deleted; resume from oldest_resume_token (or from now) and rebuild what you keep",
                reason="RESUME_TOKEN_EXPIRED", oldest_resume_token=feed_domain.token(pruned),
                oldest_time=when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
                retention_days=str(self._retention.days))
        return resume

    async def watch(self, p: Principal, f: FeedFilter, pos: Position, include_text: bool) -> AsyncIterator[FeedItem]:
        """Every event matching `f` after `pos`, then the ones committed later, forever (the caller ends
        it by cancelling). First a heartbeat naming the starting position, then one after every
        `heartbeat_s` seconds without a message."""
        admin_text = include_text and SCOPE_FEEDBACK_ADMIN in p.scopes
        yield FeedItem(pos, heartbeat_time=self._clock())  # the stream is open: its starting position
        last_sent = time.monotonic()
        pending_wait: float | None = None
        while True:
            if self._closing:
                raise Unavailable("this replica is stopping; resume with the last resume_token", retry_after_s=0.1,
                                  reason="REPLICA_STOPPING")
            woken = self._wakeups.changed()  # taken before the read: a commit during it wakes the next wait
            gen = self._wakeups.generation
            page = await self._shared(("page", pos, f, gen), lambda at=pos: self._store.feed_page(at, f, self._page_size))
            if page.events:
                res = await self._shared(("resources", tuple(e.position for e in page.events), gen),
                                         lambda events=page.events: self._store.feed_resources(events))
                if admin_text:
                    read = {e.resource_id for e in page.events if e.kind == EventKind.FEEDBACK}
                    await self._audit.read_bodies(p, [res.reports[i] for i in read if i in res.reports],
                                                  "WatchFeedback")
                for e in page.events:
                    yield FeedItem(e.position, e, *res.item_of(e), with_text=e.owner == p.sub or admin_text)
                last_sent = time.monotonic()
            pos = page.through
            if len(page.events) == self._page_size:
                continue
            if page.pending:
                pending_wait = feed_domain.next_pending_wait(pending_wait)
                timeout = pending_wait
            else:
                pending_wait = None
                timeout = max(0.0, self._heartbeat_s - (time.monotonic() - last_sent))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout)
            if not woken.is_set() and time.monotonic() - last_sent >= self._heartbeat_s:
                # The position may have moved past events this stream does not match: a heartbeat carries it.
                yield FeedItem(pos, heartbeat_time=self._clock())
                last_sent = time.monotonic()

    # ------------------------------------------------------------ retention
    def start_pruning(self, interval_s: float) -> None:
        self._pruner = asyncio.get_running_loop().create_task(self._prune_loop(interval_s))

    async def prune(self, now: dt.datetime | None = None) -> int:
        """Delete the events older than the retention as of `now` (default: this service's clock); how
        many went."""
        n = await self._store.prune_feed((now or self._clock()) - self._retention)
        if n:
            log.info("change feed: %d events older than %d days deleted", n, self._retention.days)
        return n

    async def _prune_loop(self, interval_s: float) -> None:
        await asyncio.sleep(min(PRUNE_FIRST_DELAY_S, interval_s))
        while True:
            try:
                await self.prune()
            except Exception:
                log.warning("change feed: retention pass failed", exc_info=True)
            await asyncio.sleep(interval_s)

    async def stop(self) -> None:
        if self._pruner is not None:
            self._pruner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pruner
