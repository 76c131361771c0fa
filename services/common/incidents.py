"""Expected failures (a dependency down) logged once per incident: the first in full, the rest counted.

`INCIDENTS.failure(key, message, exc)`: the first failure of `key` (e.g. `DATABASE_UNAVAILABLE`) since
the last `QUIET_S` seconds without one is logged at WARNING with its traceback; the next ones only
count, and one summary line every `SUMMARY_EVERY_S` seconds says how many there were.
`INCIDENTS.resolved(key)` (the health probe calls it when the dependency is back) closes the incident
with one line: its duration and failure count. So a 10 s database outage under load writes about
three lines per process, not one traceback per failed call.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

# An incident stays open until QUIET_S pass without a failure: longer than the longest bounded wait
# (services.common.db.COMMAND_TIMEOUT_S, 30 s) plus a worker's poll, so a dependency whose every call
# times out (a table locked by a bulk load, PostgreSQL frozen) is one incident, not one traceback per call.
QUIET_S = 90.0
SUMMARY_EVERY_S = 10.0


@dataclass
class _Incident:
    began: float
    last: float
    summary_at: float
    count: int = 1
    since_summary: int = 0


class IncidentLog:
    """Per-key incident state (thread-safe; one per process: `INCIDENTS`)."""

    def __init__(self, logger: logging.Logger, quiet_s: float = QUIET_S, summary_every_s: float = SUMMARY_EVERY_S):
        self._log = logger
        self._quiet_s = quiet_s
        self._every_s = summary_every_s
        self._open: dict[str, _Incident] = {}
        self._lock = threading.Lock()

    def failure(self, key: str, message: str, exc: BaseException | None = None) -> None:
        """Record one failure of `key`; logs it in full when it opens an incident (see module doc)."""
        now = time.monotonic()
        with self._lock:
            inc = self._open.get(key)
            if inc is None or now - inc.last > self._quiet_s:
                self._open[key] = _Incident(began=now, last=now, summary_at=now)
                first = True
            else:
                first = False
                inc.count += 1
                inc.since_summary += 1
                inc.last = now
                summary = inc.since_summary if now - inc.summary_at >= self._every_s else 0
                if summary:
                    inc.since_summary, inc.summary_at = 0, now
                total, age = inc.count, now - inc.began
        if first:
            self._log.warning("%s: %s (first failure of this incident; the next ones are counted)", key, message,
                              exc_info=exc)
        elif summary:
            self._log.warning("%s: %d more failures in the last %.0f s (%d since the incident began %.1f s ago)",
                              key, summary, self._every_s, total, age)

    def resolved(self, key: str) -> None:
        """Close `key`'s incident (no-op when none is open) with one line."""
        with self._lock:
            inc = self._open.pop(key, None)
        if inc is not None:
            self._log.warning("%s: resolved after %.1f s, %d failure(s) in all", key,
                              time.monotonic() - inc.began, inc.count)

    def count(self, key: str) -> int:
        """Failures of `key`'s open incident (0 when none)."""
        with self._lock:
            inc = self._open.get(key)
            return inc.count if inc is not None else 0


INCIDENTS = IncidentLog(logging.getLogger("agentfeedback.incidents"))


def log_failure(logger: logging.Logger, message: str, exc: BaseException) -> None:
    """A background task's failure: a dependency outage (`services.common.depfail`) counts in its
    incident; anything else is a bug, logged with its traceback every time."""
    from services.common.depfail import dependency_error  # noqa: PLC0415 - depfail never imports this module

    dep = dependency_error(exc)
    if dep is not None:
        INCIDENTS.failure(dep.reason, message, exc)
    else:
        logger.error("%s", message, exc_info=exc)
