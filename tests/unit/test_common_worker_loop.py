"""services/common/worker_loop.py: when a pass runs, and what stop() waits for."""
from __future__ import annotations

import asyncio
import logging

from services.common.worker_loop import WorkerLoop

log = logging.getLogger(__name__)


async def test_a_full_batch_runs_again_at_once_then_a_wake_up_runs_the_next():
    answers = [True, True, False, False]
    passes = 0

    async def one_pass() -> bool:
        nonlocal passes
        passes += 1
        return answers[passes - 1]

    w = WorkerLoop(one_pass, name="t", poll_s=60.0, log=log, failure="pass failed", gather_s=0.01)
    w.start()
    await asyncio.sleep(0.05)
    assert passes == 3  # two full batches, then one that waits for a wake-up (the poll is a minute)
    w.wake()
    await asyncio.sleep(0.05)
    assert passes == 4
    await w.stop()


async def test_stop_lets_the_pass_in_flight_finish():
    started, finished = asyncio.Event(), []

    async def one_pass() -> bool:
        started.set()
        await asyncio.sleep(0.05)
        finished.append(True)
        return True  # a full batch: only the flag ends the loop

    w = WorkerLoop(one_pass, name="t", poll_s=60.0, log=log, failure="pass failed")
    w.start()
    await started.wait()
    await asyncio.wait_for(w.stop(), 1.0)
    assert finished == [True]


async def test_stop_cancels_a_pass_that_outlasts_its_bound():
    cancelled = []

    async def one_pass() -> bool:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return False

    w = WorkerLoop(one_pass, name="t", poll_s=60.0, log=log, failure="pass failed")
    w.start()
    await asyncio.sleep(0)
    await asyncio.wait_for(w.stop(timeout_s=0.05), 1.0)
    assert cancelled == [True]


async def test_a_failed_pass_is_logged_and_the_loop_carries_on(caplog):
    passes = 0

    async def one_pass() -> bool:
        nonlocal passes
        passes += 1
        if passes == 1:
            raise RuntimeError("boom")
        return False

    w = WorkerLoop(one_pass, name="t", poll_s=0.01, log=log, failure="pass failed")
    w.start()
    await asyncio.sleep(0.1)
    await w.stop()
    assert passes >= 2
    assert any(r.getMessage() == "pass failed" and r.exc_info for r in caplog.records)
