"""A database outage writes one log line per interval per kind of failure, with the count of the lines it
suppressed (services/common/log_limit.py, on every service's handler: services.common.telemetry.log_handler)."""
from __future__ import annotations

import io
import logging
import socket

import asyncpg
import pytest

from services.common.log_limit import RepeatLimit
from services.common.telemetry import log_handler


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def _connect_failure(port: int) -> BaseException:
    try:
        await asyncpg.connect(f"postgresql://u@127.0.0.1:{port}/db", timeout=2)
    except Exception as e:  # noqa: BLE001 - the real failure a down database gives
        return e
    pytest.fail("connected to a closed port")


@pytest.fixture
def captured():
    """A logger writing through the services' handler into a buffer."""
    buf = io.StringIO()
    handler = log_handler(buf)
    names = ("agentfeedback.test_log_limit", "asyncpg.pool")
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False
        lg.setLevel(logging.INFO)
    yield buf, handler, loggers
    for lg in loggers:
        lg.removeHandler(handler)
        lg.propagate = True


async def test_a_burst_of_database_failures_writes_one_traceback(captured):
    buf, _, (svc, pool_log) = captured
    err = await _connect_failure(_closed_port())
    for _ in range(50):
        svc.warning("query failed", exc_info=err)
        pool_log.warning("Failed to restore the pool connection floor; retrying", exc_info=err)
    out = buf.getvalue()
    assert out.count("query failed") == 1
    assert out.count("Failed to restore the pool connection floor") == 1
    assert out.count("Traceback") == 2


async def test_the_next_line_after_the_interval_counts_the_suppressed_ones(captured):
    buf, handler, (svc, _) = captured
    now = [100.0]
    handler.filters[:] = [RepeatLimit(interval_s=10.0, clock=lambda: now[0])] + [
        f for f in handler.filters if not isinstance(f, RepeatLimit)]
    err = await _connect_failure(_closed_port())
    for _ in range(7):
        svc.error("write failed: %s", "db", exc_info=err)
        now[0] += 1.0
    svc.error("write failed: %s", "db", exc_info=err)  # 7 s after the first: still limited
    now[0] += 3.5
    svc.error("write failed: %s", "db", exc_info=err)  # 10.5 s after the first
    lines = [ln for ln in buf.getvalue().splitlines() if "write failed" in ln]
    assert len(lines) == 2
    assert lines[1].endswith("write failed: db [7 similar lines suppressed in the last 10 s]")


def test_other_lines_are_never_limited(captured):
    buf, _, (svc, _) = captured
    for i in range(20):
        svc.warning("report %d filed", i)
    try:
        raise ValueError("not the database")
    except ValueError as e:
        for _ in range(3):
            svc.warning("bad value", exc_info=e)
    out = buf.getvalue()
    assert out.count("filed") == 20
    assert out.count("bad value") == 3
