"""DeleteTurn and ClearMessages (issue 25): the delete and its notice to the feedback service are one
transactional outbox, so the two sides agree after a kill at any point.

Steps: 1. one transaction (`Repository.delete_turn` / `clear_messages`): the messages, turn records and
workspace snapshots deleted and a row recorded in the removal outbox (chat migration 0030) naming the
owner and the turns (DeleteTurn: the turn's indexes and trace id; Clear chat: every turn ≤ the latest
ever started, read under the instance's row lock, so a turn begun meanwhile is either deleted and
covered or begun after with a later index); 2. FeedbackService.NoteTurnsRemoved with this service's own
credential (scope `feedback:turn-removal`; the owner named in the request), which records the removal,
deletes the owner's ratings of those turns and marks the owner's reports of them; 3. the outbox row
deleted. A kill before 1 commits changes nothing; after it, the row stays and `RemovalRelay` (every
replica runs one) sends it again until the feedback service acknowledges it (NoteTurnsRemoved is
idempotent, so a send repeated after a kill between 2 and 3 changes nothing more). With the feedback
service down the delete still succeeds: its ratings are listed until the relay gets through (the
relay's incident says so in the log); meanwhile a new rating of the turn is refused by the feedback
service's check at chat (except for a positive answer it remembered, `rating_check_cache_s`, which the
notice then deletes), and by the feedback write itself once told.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Protocol

import grpc
from opentelemetry.metrics import Meter, Observation

from services.chat.domain import TurnRemoval
from services.chat.ratings_client import RatingsUnavailable
from services.chat.repository import Repository
from services.common.auth import Principal
from services.common.depfail import is_database_down
from services.common.errors import NotFound
from services.common.incidents import INCIDENTS

log = logging.getLogger(__name__)
# The incident of removals the feedback service has not acknowledged (one log line per incident).
RELAY_FAILED = "TURN_REMOVAL_NOT_ACKNOWLEDGED"
# Exit status of the test hook (ChatSettings.test_exit_after_removal_commit): as a SIGKILL would leave it.
TEST_EXIT_STATUS = 137
# Outbox rows one relay pass claims.
RELAY_BATCH = 50
# A replica whose send failed claims nothing for this long, doubling per failed pass (seconds).
RELAY_BACKOFF_MIN_S = 5.0
RELAY_BACKOFF_MAX_S = 60.0


class RemovalPort(Protocol):
    async def note_turns_removed(
        self, *, owner: str, conversation: str, turn_indexes: list[int], trace_ids: list[str],
        through_turn_index: int | None, token: str, timeout_s: float | None,
    ) -> int: ...


class TurnRemover:
    """DeleteTurn / ClearMessages over the repository and the feedback service; `token()` is this
    service's own bearer token for NoteTurnsRemoved."""

    def __init__(self, repo: Repository, feedback: RemovalPort, token: Callable[[], str],
                 exit_after_commit: bool = False):
        self._repo = repo
        self._feedback = feedback
        self._token = token
        self._exit_after_commit = exit_after_commit

    async def send(self, removal: TurnRemoval, timeout_s: float | None) -> bool:
        """Tell the feedback service about `removal` and drop its outbox row; False (the row stays, the
        relay sends it again) when the call failed."""
        try:
            await self._feedback.note_turns_removed(
                owner=removal.owner, conversation=f"instances/{removal.instance_id}",
                turn_indexes=list(removal.turn_indexes), trace_ids=list(removal.trace_ids),
                through_turn_index=removal.through_turn_index, token=self._token(), timeout_s=timeout_s)
        except (RatingsUnavailable, grpc.aio.AioRpcError) as e:
            why = e.code().name if isinstance(e, grpc.aio.AioRpcError) else "UNAVAILABLE"
            INCIDENTS.failure(RELAY_FAILED, f"the feedback service did not acknowledge a turn removal ({why}); "
                                            "kept in the outbox, sent again")
            await self._repo.removal_failed(removal.id, why)
            return False
        INCIDENTS.resolved(RELAY_FAILED)
        await self._repo.removal_sent(removal.id)
        return True

    async def _committed(self, removal: TurnRemoval, remaining_s: float | None) -> None:
        if self._exit_after_commit:  # TEST HOOK: killed between the delete and the notice
            os._exit(TEST_EXIT_STATUS)
        try:
            await self.send(removal, remaining_s)
        except Exception as e:  # noqa: BLE001 - the delete is committed: the relay finishes what this could not
            INCIDENTS.failure(RELAY_FAILED, "a turn removal's outbox row could not be updated; the relay sends it again", e)

    async def delete_turn(self, p: Principal, instance_id: str, conversation: str, trace_id: str,
                          remaining_s: float | None) -> None:
        """NOT_FOUND when the instance has no stored message of that trace (a repeat after success)."""
        removal = await self._repo.delete_turn(p.sub, instance_id, trace_id)
        if removal is None:
            raise NotFound(f"{conversation} turn {trace_id}")
        await self._committed(removal, remaining_s)

    async def clear(self, p: Principal, instance_id: str, conversation: str, remaining_s: float | None) -> int:
        """Messages deleted (an instance without turns has nothing to tell)."""
        deleted, removal = await self._repo.clear_messages(p.sub, instance_id)
        if removal is not None:
            await self._committed(removal, remaining_s)
        return deleted


class RemovalRelay:
    """Sends the outbox rows no request sent (killed, feedback down): every `poll_s` seconds it claims
    the due rows (each leased for its backoff, see repository CLAIM_REMOVALS) and sends them in order.

    With a `meter`, each pass also reads the outbox for two gauges (the whole table, all replicas: take
    `max` across replicas, not `sum`): `agentfeedback.chat.turn_removal_backlog` (removals the feedback
    service has not acknowledged) and `agentfeedback.chat.turn_removal_oldest_pending_age` (s; 0: none).
    Until a removal is acknowledged, the deleted turn's ratings are still listed by the feedback
    service, so an operator alerts on the age (deploy/monitoring/alerts.yaml)."""

    def __init__(self, repo: Repository, remover: TurnRemover, poll_s: float, meter: Meter | None = None):
        self._repo = repo
        self._remover = remover
        self._poll_s = poll_s
        self._task: asyncio.Task | None = None
        self._backoff_s = 0.0
        self._quiet_until = 0.0
        self._backlog, self._oldest_age_s = 0, 0.0
        if meter is not None:
            meter.create_observable_gauge("agentfeedback.chat.turn_removal_backlog", unit="{removal}",
                                          callbacks=[lambda _o: [Observation(self._backlog)]],
                                          description="Turn removals the feedback service has not acknowledged.")
            meter.create_observable_gauge("agentfeedback.chat.turn_removal_oldest_pending_age", unit="s",
                                          callbacks=[lambda _o: [Observation(self._oldest_age_s)]],
                                          description="Age of the oldest unacknowledged turn removal.")

    async def refresh(self) -> None:
        """Read the outbox's gauges now (every pass does)."""
        count, oldest = await self._repo.removal_backlog()
        self._backlog = count
        self._oldest_age_s = max(0.0, time.time() - oldest.timestamp()) if oldest is not None else 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="turn-removal-relay")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def run_once(self) -> int:
        """One pass; the removals acknowledged. After a pass whose send failed, this replica claims
        nothing for its own backoff (5 s doubling to 60 s, reset by a sent removal): the row goes back
        to the outbox at once (repository REMOVAL_FAILED), so a replica that reaches the feedback
        service sends it at its next poll, and one that cannot does not take it from the others."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._quiet_until:
            return 0
        sent = 0
        for removal in await self._repo.claim_removals(RELAY_BATCH):
            if not await self._remover.send(removal, None):
                self._backoff_s = min(RELAY_BACKOFF_MAX_S, max(RELAY_BACKOFF_MIN_S, self._backoff_s * 2))
                self._quiet_until = loop.time() + self._backoff_s
                break  # the rest of this batch is already claimed: handed back when their lease ends
            sent += 1
            self._backoff_s = 0.0
        return sent

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
                await self.refresh()
            except Exception as e:  # noqa: BLE001 - the loop outlives a bad pass; the next one retries
                if is_database_down(e):
                    INCIDENTS.failure("DATABASE_UNAVAILABLE", "turn removal relay pass failed", e)
                else:
                    log.exception("turn removal relay pass failed")
            await asyncio.sleep(self._poll_s)
