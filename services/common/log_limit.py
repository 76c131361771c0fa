"""Repeated database-outage log lines, at most one per interval (issue 25: during an outage asyncpg wrote a
traceback every 1-2 s in each service, e.g. its pool's "Failed to restore the pool connection floor").

`RepeatLimit` is a `logging.Filter` on the handler every service logs through
(`services.common.telemetry.log_handler`). It limits the records of asyncpg's own loggers and every
record carrying an exception that `services.common.depfail.is_database_down` reads as the database
being down: per (logger, message template, exception type), the first record passes, the next ones
within `interval_s` seconds are dropped and counted, and the first record after the interval passes
with ` [N similar lines suppressed in the last S s]` appended. Other records are never touched.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from services.common.depfail import is_database_down

INTERVAL_S = 10.0
# Loggers whose records are limited whatever they carry (asyncpg logs its reconnect failures itself).
LIMITED_LOGGERS = ("asyncpg",)
MAX_KEYS = 1000


class RepeatLimit(logging.Filter):
    """One line per (logger, message, exception type) per `interval_s` (monotonic clock), with the count
    of the lines suppressed since the last one that passed. Thread-safe."""

    def __init__(self, interval_s: float = INTERVAL_S, loggers: tuple[str, ...] = LIMITED_LOGGERS,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        self._loggers = loggers
        self._lock = threading.Lock()
        # key → (time the last passing line was written, lines suppressed since)
        self._seen: dict[tuple[str, str, str], tuple[float, int]] = {}

    def _limited(self, record: logging.LogRecord) -> bool:
        if any(record.name == n or record.name.startswith(n + ".") for n in self._loggers):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        return exc is not None and is_database_down(exc)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._limited(record):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        key = (record.name, str(record.msg), type(exc).__name__ if exc is not None else "")
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self._interval_s:
                self._seen[key] = (last[0], last[1] + 1)
                return False
            if len(self._seen) >= MAX_KEYS:
                self._seen.clear()  # bounded: a flood of distinct messages loses only its counts
            self._seen[key] = (now, 0)
        if last is not None and last[1]:
            record.msg = (f"{record.getMessage()} [{last[1]} similar lines suppressed in the last "
                          f"{now - last[0]:.0f} s]")
            record.args = None
        return True
