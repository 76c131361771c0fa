"""ForkConversation (issue 13): branch a conversation at a turn into a new instance of the same owner.

Choice (the issue leaves it open): a fork is a new *instance*, not a second conversation inside one,
so everything keyed by `instances/{id}` (messages, ratings, reports, suspected defects, the console's
pages) works on it unchanged. Steps:
1. The fork and the copies of turns 0..`turn_index` in one transaction (`Repository.fork`): new message
   ids, the same turn index, create time and trace id (feedback on a copy freezes the original turn's
   spans), `source_message` / `source_trace_id` pointers. The fork's next turn is `turn_index + 1`.
2. The caller's ratings of those turns copied by FeedbackService.CopyRatings (BRANCH_COPY), with the
   caller's token, keyed by a request id derived from the fork (`copy_request_id`): however often the
   fork is retried, the feedback service copies its ratings once.
A retry with the fork's `request_id` finds the fork (step 1 writes nothing) and repeats step 2 (a
no-op once done): so a fork whose rating copy failed (UNAVAILABLE) is finished by retrying it.
A token without `feedback:write` forks messages only (its ratings cannot be written by it anyway).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from services.chat.domain import SLUG, Instance, NewInstance, parse_instance_name
from services.chat.repository import InstanceExists, Repository
from services.chat.ratings_client import RatingsUnavailable
from services.common.auth import SCOPE_FEEDBACK_WRITE, Principal
from services.common.errors import AlreadyExists, InvalidArgument, NotFound, Unavailable
from services.common.clip import truncate
from services.common.ids import check_label, new_id, parse_request_id

MAX_DISPLAY_NAME_CHARS = 200
FORK_SUFFIX = " (fork)"
# Namespace of the CopyRatings request ids derived from forks (uuid5 of owner + fork id).
_COPY_NS = uuid.UUID("6f0b7f49-4a54-4d35-9a7e-7a4c8f1c2e13")


class RatingsPort(Protocol):
    async def copy(
        self, *, source: str, target: str, through_turn_index: int, request_id: str, token: str,
        timeout_s: float | None,
    ) -> int: ...


@dataclass(frozen=True)
class ForkResult:
    instance: Instance
    copied_messages: int
    copied_ratings: int


def copy_request_id(owner: str, fork_id: str) -> str:
    """The CopyRatings request id of a fork: one per (owner, fork), whatever the client retries."""
    return str(uuid.uuid5(_COPY_NS, f"{owner}\x00{fork_id}"))


def fork_display_name(parent_name: str) -> str:
    return truncate(parent_name, MAX_DISPLAY_NAME_CHARS - len(FORK_SUFFIX))[0] + FORK_SUFFIX


def validate_fork(parent: str, turn_index: int, instance_id: str, display_name: str,
                  request_id: str) -> tuple[str, uuid.UUID | None]:
    """ForkConversation's checks on the request alone (no I/O): `(parent id, request id or None)`.
    INVALID_ARGUMENT naming `parent`, `turn_index` (negative), `instance_id` (not a slug),
    `display_name` (services.common.ids.check_label) or `request_id` (not a UUID)."""
    parent_id = parse_instance_name(parent, "parent")
    if turn_index < 0:
        raise InvalidArgument("turn_index", "must not be negative")
    if instance_id and not SLUG.match(instance_id):
        raise InvalidArgument("instance_id", "must match [a-z][a-z0-9-]{0,62}")
    check_label(display_name, "display_name", MAX_DISPLAY_NAME_CHARS)
    return parent_id, parse_request_id(request_id)


class Forker:
    def __init__(self, repo: Repository, ratings: RatingsPort):
        self._repo = repo
        self._ratings = ratings

    async def fork(
        self, p: Principal, parent: str, turn_index: int, instance_id: str, display_name: str,
        request_id: str, fingerprint: bytes, remaining_s: float | None,
    ) -> ForkResult:
        """See the module doc and chat.proto ForkConversation for the errors."""
        parent_id, rid = validate_fork(parent, turn_index, instance_id, display_name, request_id)
        src = await self._repo.get_instance(p.sub, parent_id)
        if src is None:
            raise NotFound(parent)
        new = NewInstance(
            id=instance_id or new_id(), display_name=display_name or fork_display_name(src.display_name),
            agent=src.agent, request_id=rid, request_fingerprint=fingerprint if rid is not None else None,
        )
        try:
            got = await self._repo.fork(p.sub, parent_id, new, turn_index, datetime.now(UTC))
        except InstanceExists:
            raise AlreadyExists(f"instances/{new.id}") from None
        if got == "parent":
            raise NotFound(parent)
        if got == "turn":
            raise NotFound(f"{parent} turn {turn_index}")
        inst, n_messages = got
        copied = 0
        if SCOPE_FEEDBACK_WRITE in p.scopes:
            try:
                copied = await self._ratings.copy(
                    source=inst.fork_source, target=inst.name, through_turn_index=inst.fork_turn_index,
                    request_id=copy_request_id(p.sub, inst.id), token=p.token, timeout_s=remaining_s,
                )
            except RatingsUnavailable as e:
                raise Unavailable(
                    f"the fork {inst.name} is stored but its ratings are not copied yet ({e}); "
                    "retry with the same request_id",
                    retry_after_s=1.0, reason="FEEDBACK_UNAVAILABLE", fork=inst.name,
                ) from None
        return ForkResult(inst, n_messages, copied)
