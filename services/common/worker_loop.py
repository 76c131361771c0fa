"""A background worker's loop: one pass, then the next at once (a full batch), after a wake-up or after a poll.

A flag, not a cancel, ends the loop: on Python 3.11 a cancel that reaches `asyncio.wait_for` as the
awaited wake-up completes is lost (CPython gh-86296), and the loop ran on while stop() waited for it
(a service's stop hung). So the loop waits with `asyncio.timeout`, and `stop()` sets the flag, wakes
the loop and lets the pass in flight finish; it cancels only a pass that outlasts its bound.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from services.common.incidents import log_failure


class WorkerLoop:
    """Runs `one_pass` in a task named `name`: again at once while it returns True (it took a full
    batch), else after `wake()` and `gather_s` seconds more (the wake-ups of that moment go in one
    pass), or after `poll_s` seconds without one. A pass that raises is logged as `failure` on `log`
    (`incidents.log_failure`) and the loop carries on."""

    def __init__(self, one_pass: Callable[[], Awaitable[bool]], *, name: str, poll_s: float, log: logging.Logger,
                 failure: str, gather_s: float = 0.0):
        self._one_pass, self._name = one_pass, name
        self._poll_s, self._gather_s = poll_s, gather_s
        self._log, self._failure = log, failure
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False

    def start(self) -> None:
        """Run the loop in a task (in the running event loop)."""
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name=self._name)

    def wake(self) -> None:
        """Make the loop run a pass now (after `gather_s` seconds), not at the next poll."""
        self._wake.set()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Let the pass in flight finish, at most `timeout_s` seconds; then cancel it."""
        if self._task is None:
            return
        self._stopping = True
        self._wake.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self._task, timeout_s)
        self._task = None

    async def _run(self) -> None:
        while not self._stopping:
            try:
                more = await self._one_pass()
            except Exception as e:  # noqa: BLE001 - the worker survives a bad pass (database restart, …)
                log_failure(self._log, self._failure, e)
                more = False
            if more or self._stopping:
                continue
            self._wake.clear()
            try:
                async with asyncio.timeout(self._poll_s):
                    await self._wake.wait()
            except TimeoutError:
                continue
            if self._gather_s > 0 and not self._stopping:
                await asyncio.sleep(self._gather_s)
