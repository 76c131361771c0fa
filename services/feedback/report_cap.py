"""The per-owner cap on stored reports (`max_reports_per_owner`), as `Reports.create` applies it.

Counting and inserting in two statements let concurrent creates of one owner overshoot the cap (six
arriving at once all counted the same stored reports and all inserted). Near the cap, the count and
the insert therefore run together under the owner's lock (`ReportStore.insert_report(…, cap=n)`: a
transaction advisory lock keyed on the owner, held by one replica at a time), and the request id is
looked up again under it, so a concurrent duplicate of a request is answered with the report its twin
stored, never refused. Within one replica, the capped creates of an owner also queue here, before
they take a pool connection: a burst of one owner waits on one connection, not on all of them.

Far from the cap no lock and no count is needed (the common path: one insert statement): the write
quota (`writes_per_minute` per owner, all replicas together, GCRA with a burst of at most that) grants
at most 3 × that to the creates that can still insert within 60 s of a count — those in flight at the
count hold tokens of at most one burst, the next 60 s grant at most a burst and a minute's rate — so
an owner counted below cap − 3 × writes_per_minute needs neither for 60 s. Without a write quota every create is capped
under the lock.
"""
from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager

from services.common.clip import clip
from services.common.errors import ResourceExhausted
from services.common.keyed_locks import KeyedLocks

# Seconds a count far below the cap is trusted (the write quota's window).
TRUSTED_S = 60.0
# Owners remembered as far below the cap, per replica (a bound on memory; forgetting costs one lock).
_MAX_REMEMBERED = 10_000


class ReportCap:
    """`cap` stored reports per owner (0: no cap) under a write quota of `writes_per_minute` (0: none)."""

    def __init__(self, cap: int, writes_per_minute: int):
        self.cap = cap
        self._writes = writes_per_minute
        self._far_below: dict[str, float] = {}  # owner → monotonic time of a count far below the cap
        self._queues = KeyedLocks()

    def limit_for(self, owner: str) -> int | None:
        """The cap a new report of `owner` must be inserted under, or None when it needs no check (no
        cap, or the owner was counted far below it within TRUSTED_S). Runs no statement."""
        if self.cap <= 0:
            return None
        seen = self._far_below.get(owner)
        if seen is not None and time.monotonic() - seen < TRUSTED_S:
            return None
        return self.cap

    def counted(self, owner: str, n: int) -> None:
        """`owner` has `n` reports stored (counted under the lock): far below the cap, the next
        TRUSTED_S seconds of their creates take the lock-free path."""
        if self._writes > 0 and n + 3 * self._writes < self.cap:
            if len(self._far_below) >= _MAX_REMEMBERED and owner not in self._far_below:
                self._far_below.clear()
            self._far_below[owner] = time.monotonic()

    def refusal(self, owner: str) -> ResourceExhausted:
        """RESOURCE_EXHAUSTED (STORED_REPORTS_EXCEEDED, QuotaFailure `owner:<sub>`, no RetryInfo: waiting
        does not help, deleting reports does)."""
        what = f"at most {self.cap} stored reports"
        return ResourceExhausted(f"owner {clip(owner)} has reached the cap of {self.cap} stored reports: delete"
                                 " reports to store new ones", reason="STORED_REPORTS_EXCEEDED", retry_after_s=None,
                                 quota=((f"owner:{owner}", what),), limit=what)

    def queued(self, owner: str) -> AbstractAsyncContextManager[None]:
        """One capped create of `owner` at a time in this replica (the others wait here, holding no
        connection)."""
        return self._queues.hold(owner)
