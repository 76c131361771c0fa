"""The quote indexer: keeps the quoted replies' side index (migration 0095) up with the reports.

Why behind the writes: a quote's ~900 trigram entries written by the create's own INSERT were the
create's tail (migration 0095 says by how much). A create leaves a pending row in its transaction;
this worker moves pending quotes into the unlogged side table a moment later, GATHER_S after the
create that woke it (so a burst of creates is one pass), or at the next POLL_S poll (a create on a
replica that runs no worker, a hand-run change). Searches never wait for it: they read pending
reports' own text (exact either way; repository/reports.py QUOTE_CANDIDATES).

After a crash or a failover the side table and its marker are empty: a pass sees `built` false and
rebuilds (REBUILD_BATCH reports a statement, in id order), then sets the marker. Several replicas may
run one each: passes skip each other's pending rows (SKIP LOCKED); two rebuilds only repeat work.
"""
from __future__ import annotations

import logging

from services.common.worker_loop import WorkerLoop
from services.feedback.repository.quotes import QuoteStore

log = logging.getLogger(__name__)

BATCH = 200  # pending reports a pass takes (one statement)
REBUILD_BATCH = 5000  # reports a rebuild statement reads (well inside the 30 s command bound at 1M)
GATHER_S = 0.05  # after a wake-up: the creates of this long go in one pass
POLL_S = 1.0


class QuoteIndexer:
    """`start()` runs the loop in a task; `wake()` after a write that left a pending quote; `stop()`."""

    def __init__(self, store: QuoteStore, poll_s: float = POLL_S, gather_s: float = GATHER_S):
        self._store = store
        self._worker = WorkerLoop(self._pass, name="feedback-quote-index", poll_s=poll_s, gather_s=gather_s, log=log,
                                failure="quote index pass failed")

    def start(self) -> None:
        """Run the indexer in a task."""
        self._worker.start()

    def wake(self) -> None:
        """Index the pending quotes `gather_s` from now, not at the next poll."""
        self._worker.wake()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Let the pass in flight finish, at most `timeout_s`; then cancel (a pass cut short is done
        again by the next one: its statement rolls back)."""
        await self._worker.stop(timeout_s)

    async def run_once(self) -> int:
        """One pass (a rebuild first when the side table is not built): pending reports indexed."""
        done = await self._store.index_pending(BATCH)
        if not done.built:
            await self.rebuild()
        return done.moved

    async def rebuild(self) -> int:
        """Write every report's quote into the side table, then mark it built: reports read."""
        log.warning("quote index: the side table is not built (a crash or failover empties it); rebuilding")
        after, total = "", 0
        while True:
            after, n = await self._store.rebuild_step(after, REBUILD_BATCH)
            total += n
            if n < REBUILD_BATCH:
                break
        await self._store.mark_built()
        log.info("quote index: rebuilt from %d reports", total)
        return total

    async def _pass(self) -> bool:
        return await self.run_once() >= BATCH
