"""The feedback service's own metrics (besides the shared RPC and pool ones):

- `agentfeedback_feedback_reports_created_total{author}`: reports stored (a retry of a request that
  stored one counts nothing), by `author` (USER | AGENT | …, the model's Author enum name);
- `agentfeedback_feedback_ratings_written_total{scope}`: PutRating calls that wrote (retries and
  no-op puts write nothing), by rating `scope` (MESSAGE | TURN | …, the model's RatingScope name);
- `agentfeedback_feedback_capture_backlog`: reports whose trace snapshot is PENDING (all replicas:
  read from the database every `BACKLOG_EVERY_S`; take `max` across replicas, not `sum`);
- `agentfeedback_feedback_capture_oldest_pending_age_seconds`: age of the oldest PENDING one (0: none).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from opentelemetry.metrics import Meter, Observation

from services.common.incidents import log_failure
from services.common.metrics import LocalCounter
from services.feedback.repository.capture import CaptureStore

log = logging.getLogger(__name__)

BACKLOG_EVERY_S = 5.0


class FeedbackMetrics:
    def __init__(self, meter: Meter, repo: CaptureStore, every_s: float = BACKLOG_EVERY_S):
        self._reports = LocalCounter(meter, "agentfeedback.feedback.reports_created", unit="{report}",
                                     description="Reports stored, by author.")
        self._ratings = LocalCounter(meter, "agentfeedback.feedback.ratings_written", unit="{rating}",
                                     description="Ratings written by PutRating, by scope.")
        self._scope_attrs: dict[Any, dict[str, str]] = {}
        self._backlog, self._oldest_age_s = 0, 0.0
        meter.create_observable_gauge("agentfeedback.feedback.capture_backlog", [lambda _o: [Observation(self._backlog)]],
                                      unit="{report}", description="Reports whose trace snapshot is PENDING.")
        meter.create_observable_gauge("agentfeedback.feedback.capture_oldest_pending_age", unit="s",
                                      callbacks=[lambda _o: [Observation(self._oldest_age_s)]],
                                      description="Age of the oldest PENDING trace snapshot.")
        self._repo = repo
        self._every_s = every_s
        self._task: asyncio.Task | None = None

    def report_created(self, author: Any) -> None:
        self._reports.add(1, {"author": getattr(author, "name", str(author))})

    def rating_written(self, scope: Any) -> None:
        attrs = self._scope_attrs.get(scope)
        if attrs is None:
            attrs = self._scope_attrs[scope] = {"scope": getattr(scope, "name", str(scope))}
        self._ratings.add(1, attrs)

    async def refresh(self) -> None:
        """Read the backlog now (the loop does it every `every_s`)."""
        count, oldest = await self._repo.capture_backlog()
        self._backlog = count
        self._oldest_age_s = max(0.0, time.time() - oldest.timestamp()) if oldest is not None else 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="feedback-metrics")

    async def stop(self) -> None:
        if self._task is not None:  # bounded: a stop never waits on the database
            self._task.cancel()
            await asyncio.wait([self._task], timeout=2.0)

    async def _loop(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep the last figures; the next pass retries
                log_failure(log, "reading the capture backlog failed", e)
            await asyncio.sleep(self._every_s)
