"""One incident per outage: the first failure in full, the rest counted, however slowly they come."""
from __future__ import annotations

import logging

from services.common import incidents
from services.common.db import COMMAND_TIMEOUT_S


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _log(monkeypatch, caplog) -> tuple[incidents.IncidentLog, _Clock]:
    clock = _Clock()
    monkeypatch.setattr(incidents.time, "monotonic", clock)
    caplog.set_level(logging.WARNING, logger="test.incidents")
    return incidents.IncidentLog(logging.getLogger("test.incidents")), clock


def _firsts(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "first failure of this incident" in r.getMessage()]


def test_calls_that_each_time_out_after_the_whole_bound_are_one_incident(monkeypatch, caplog):
    """A worker whose every statement waits COMMAND_TIMEOUT_S and then polls again fails about every
    35 s: one WARNING with a traceback for the whole outage (before: one per failure)."""
    log, clock = _log(monkeypatch, caplog)
    for _ in range(6):
        log.failure("DATABASE_UNAVAILABLE", "capture pass failed", TimeoutError("no answer"))
        clock.t += COMMAND_TIMEOUT_S + 5
    firsts = _firsts(caplog)
    assert len(firsts) == 1 and firsts[0].exc_info is not None
    assert log.count("DATABASE_UNAVAILABLE") == 6


def test_a_failure_after_a_quiet_spell_opens_a_new_incident(monkeypatch, caplog):
    log, clock = _log(monkeypatch, caplog)
    log.failure("DATABASE_UNAVAILABLE", "capture pass failed")
    clock.t += incidents.QUIET_S + 1
    log.failure("DATABASE_UNAVAILABLE", "capture pass failed")
    assert len(_firsts(caplog)) == 2 and log.count("DATABASE_UNAVAILABLE") == 1
    log.resolved("DATABASE_UNAVAILABLE")
    assert log.count("DATABASE_UNAVAILABLE") == 0 and "resolved after" in caplog.records[-1].getMessage()
