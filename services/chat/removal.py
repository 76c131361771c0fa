"""DeleteTurn and ClearMessages (issue 25): the feedback service is told BEFORE the turns go.

Steps: 1. the turns to remove (the trace's turn index; every turn ever started, for Clear chat);
2. FeedbackService.NoteTurnsRemoved with the caller's token (the owner: the ratings are the caller's,
scope `chat` is what DeleteTurn itself needs), which records the removal, deletes the caller's
ratings of those turns and marks the caller's reports of them (kept, no longer counted); 3. the messages, turn records and workspace snapshots deleted (one transaction,
`Repository.delete_turn` / `clear_messages`). If step 2 fails, nothing is deleted: UNAVAILABLE
(FEEDBACK_UNAVAILABLE, RetryInfo) and a retry is safe (NoteTurnsRemoved is idempotent). A crash between
2 and 3 leaves the turn shown but no longer rateable; repeating the call finishes it.
Clear chat: a turn started while the clear runs (after step 1) is deleted in step 3 but was not told;
its ratings could only be written in that instant and are then refused by chat's own turn check.
"""

from __future__ import annotations

from typing import Protocol

from services.chat.ratings_client import RatingsUnavailable
from services.chat.repository import Repository
from services.common.auth import Principal
from services.common.errors import NotFound, Unavailable


class RemovalPort(Protocol):
    async def note_turns_removed(
        self, *, conversation: str, turn_indexes: list[int] | None = None, trace_ids: list[str] | None = None,
        through_turn_index: int | None = None, token: str, timeout_s: float | None,
    ) -> int: ...


class TurnRemover:
    """DeleteTurn / ClearMessages over the repository and the feedback service."""

    def __init__(self, repo: Repository, feedback: RemovalPort):
        self._repo = repo
        self._feedback = feedback

    async def _tell(self, p: Principal, conversation: str, remaining_s: float | None, **turns) -> None:
        try:
            await self._feedback.note_turns_removed(conversation=conversation, token=p.token,
                                                    timeout_s=remaining_s, **turns)
        except RatingsUnavailable as e:
            raise Unavailable(
                f"nothing deleted: the feedback service could not be told that {conversation}'s turns go "
                f"({e}); retry", retry_after_s=1.0, reason="FEEDBACK_UNAVAILABLE",
            ) from None

    async def delete_turn(self, p: Principal, instance_id: str, conversation: str, trace_id: str,
                          remaining_s: float | None) -> None:
        """NOT_FOUND when the instance has no stored message of that trace (a repeat after success)."""
        indexes = await self._repo.turn_indexes_of(p.sub, instance_id, trace_id)
        if not indexes:
            raise NotFound(f"{conversation} turn {trace_id}")
        await self._tell(p, conversation, remaining_s, turn_indexes=indexes, trace_ids=[trace_id])
        if await self._repo.delete_turn(p.sub, instance_id, trace_id) == 0:
            raise NotFound(f"{conversation} turn {trace_id}")  # a concurrent DeleteTurn won

    async def clear(self, p: Principal, instance_id: str, conversation: str, remaining_s: float | None) -> int:
        """Messages deleted (0 for an instance without turns: nothing to tell)."""
        last = await self._repo.last_turn_index(p.sub, instance_id)
        if last is not None and last >= 0:
            await self._tell(p, conversation, remaining_s, through_turn_index=last)
        return await self._repo.clear_messages(p.sub, instance_id)
