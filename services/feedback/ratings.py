"""Ratings, the use case: put, delete, list, copy onto a fork (docs/architecture.md "The life of a rating").

A rating is one owner's judgement of one aspect of a turn (or conversation): unique by (conversation,
turn, owner, scope, aspect, artifact). The rated conversation is checked at the chat service with the
caller's token (ownership lives where the data lives); positive answers about the conversation (never
about a turn, which DeleteTurn can remove) are briefly remembered.
"""
from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from typing import Any

from services.common.auth import Principal
from services.common.errors import InvalidArgument, NotFound
from services.common.ids import check_same_request, decimal_id, new_id
from services.feedback import domain
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.model.enums import RatingScope
from services.feedback.model.rating import Rating, RatingFilter, RatingKey, RatingPut, RatingWrite
from services.feedback.repository.ratings import RatingStore, TurnRemoved


class TtlCache:
    """A bounded map whose entries expire `ttl_s` seconds after they were stored (monotonic clock)."""

    def __init__(self, ttl_s: float, max_entries: int = 10_000):
        self._ttl_s = ttl_s
        self._max = max_entries
        self._d: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> Any | None:
        hit = self._d.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: Any, value: Any) -> None:
        if self._ttl_s <= 0:
            return
        if len(self._d) >= self._max:
            now = time.monotonic()
            self._d = {k: v for k, v in self._d.items() if v[0] >= now}
            if len(self._d) >= self._max:
                self._d.clear()
        self._d[key] = (time.monotonic() + self._ttl_s, value)


# ARTIFACT scope: `0` rates the live document (no artifact of the workspace; feedback.proto Rating.artifact_id).
LIVE_DOCUMENT = "0"


def artifact_number(key: RatingKey) -> int:
    """The workspace artifact an ARTIFACT rating names: 0 for the live document; INVALID_ARGUMENT naming
    `rating.artifact_id` (UNKNOWN_ARTIFACT) for an id that is not a decimal ≥ 1 (no artifact has it)."""
    aid = key.artifact_id
    if aid == LIVE_DOCUMENT:
        return 0
    n = decimal_id(aid)
    if n is None:
        raise InvalidArgument("rating.artifact_id", "must be 0 (the live document) or the id of an artifact of "
                              "the conversation", reason="UNKNOWN_ARTIFACT")
    return n


class Ratings:
    """The rating use cases over the ratings store and the chat service."""

    def __init__(self, repo: RatingStore, chat: ChatClient, check_cache_s: float):
        # Optional `(scope)` hook called once per rating written (the service's metrics).
        self.on_written: Callable[[Any], None] | None = None
        # Optional `(rating, turn trace id)` hook per rating written (its telemetry: evaluation_events).
        self.on_evaluated: Callable[[Rating, str], None] | None = None
        self._repo = repo
        self._chat = chat
        # (sub, scopes, conversation, turn or None) → (rated message name, trace id): positive checks, briefly kept.
        self._checked = TtlCache(check_cache_s)

    async def _rated_message(self, p: Principal, key: RatingKey) -> tuple[str, str]:
        """Ownership / target check at the chat service (caller's token): MESSAGE scope needs a stored
        non-empty assistant message in that turn (its name is returned); other scopes need the
        conversation to be the caller's. NOT_FOUND otherwise; UNAVAILABLE when chat is down.
        Returns (the rated message's name, its turn's trace id); ('', '') for the other scopes.

        A positive answer about a conversation or a turn is remembered for `rating_check_cache_s`
        seconds per (caller, the token's scopes, conversation, turn), so a burst of clicks on one turn
        asks the chat service once, and a token the chat service would refuse (no `chat` scope) never
        rides on another token's answer. A remembered turn that DeleteTurn or Clear chat removes since
        is refused once chat's notice arrives (NoteTurnsRemoved, sent from chat's outbox right after its
        delete, normally within the DeleteTurn call): the rating's own INSERT is refused on a removed
        turn (TurnRemoved → NOT_FOUND naming the turn), on every replica, and a rating written before
        the notice is deleted by it (docs/architecture.md "The life of a rating"). An artifact is asked about every
        time (removing a turn removes artifact versions, which no trigger covers). Negative answers are
        never cached. An ARTIFACT rating's `artifact_id` other than `0` (the live document) must name
        an artifact of the conversation (ChatService.GetArtifact): INVALID_ARGUMENT naming
        `rating.artifact_id` (reason UNKNOWN_ARTIFACT) otherwise."""
        message_scope = key.scope == RatingScope.MESSAGE
        artifact = artifact_number(key) if key.scope == RatingScope.ARTIFACT else 0
        cacheable = not artifact
        cache_key = (p.sub, p.scopes, key.conversation, key.turn_index if message_scope else None)
        hit = self._checked.get(cache_key) if cacheable else None
        if hit is not None:
            return hit
        try:
            if message_scope:
                turn = await self._chat.list_turn(key.conversation, p.metadata, turn_index=key.turn_index,
                                                  field_path="rating.conversation")
                reply = next((m for m in turn if m.role == "ROLE_ASSISTANT" and m.content.strip()), None)
                if reply is None:
                    raise NotFound(f"{key.conversation} turn {key.turn_index} assistant message",
                                   reason="NO_ASSISTANT_MESSAGE")
                name = (reply.name, reply.trace_id)
            elif artifact:
                if not await self._chat.has_artifact(key.conversation, artifact, p.metadata, "rating.conversation"):
                    raise InvalidArgument("rating.artifact_id", "is not an artifact of the conversation "
                                          "(0 rates the live document)", reason="UNKNOWN_ARTIFACT")
                name = ("", "")
            else:
                await self._chat.check_instance(key.conversation, p.metadata, "rating.conversation")
                name = ("", "")
        except ChatUnreachable as e:
            raise e.unavailable("to check the rated conversation") from None
        if cacheable:
            self._checked.put(cache_key, name)
        return name

    async def put(self, p: Principal, put: RatingPut) -> Rating:
        """Idempotent upsert (`put.version` None) or strict compare-and-swap (AIP-154 etag). A retry with
        the same request id writes nothing and answers with the rating as it is now (NOT_FOUND if deleted
        since); ABORTED (`domain.Stale`, carrying the current rating) on a stale etag; NOT_FOUND when there
        is no such rating to CAS or the rated turn is not the caller's."""
        key, version, fingerprint = put.key, put.version, put.fingerprint
        message, trace_id = await self._rated_message(p, key)
        w = put.write
        # Built directly: dataclasses.replace reads the class's fields first (≈ 2.4 -> 1.2 µs a put).
        w = RatingWrite(w.sentiment, w.category, w.note, w.owned, message, w.reasons, w.choice)
        try:
            got = await self._repo.put_rating(key, p.sub, w, new_id=new_id(), etag=version,
                                              request_id=put.request_id, fingerprint=fingerprint)
        except TurnRemoved:  # removed after chat answered (NoteTurnsRemoved): the write refused it
            raise _removed(key.conversation, key.turn_index) from None
        if got.written is not None:
            if self.on_written is not None:
                self.on_written(key.scope)
            if self.on_evaluated is not None:
                self.on_evaluated(got.written, trace_id)
            return got.written
        cur = await self._repo.get_rating(key, p.sub)
        what = f"rating {key.conversation} turn {key.turn_index} {key.aspect}"
        if got.seen:  # a retry: nothing written, the rating as it is now (AIP-155)
            check_same_request(got.prior_fingerprint, fingerprint)
            if cur is None:
                raise NotFound(f"{what} (deleted since this put)")
            return cur
        if version is None:  # a no-op: the rating as it was
            assert cur is not None
            return cur
        if cur is None:
            raise NotFound(what)
        raise domain.Stale(put.etag, cur)

    async def note_turns_removed(self, owner: str, conversation: str, ranges: list[tuple[int, int]],
                                 trace_ids: list[str]) -> tuple[int, int]:
        """The chat service removed `owner`'s turns (DeleteTurn / ClearMessages, sent from its outbox
        until acknowledged): record the removal, delete the owner's ratings of those turns and mark the
        owner's reports of them (their snapshot's turn index in `ranges`, or of `trace_ids`) with
        turn_removed_time (kept as evidence, no longer counted by the statistics); one transaction, the
        rollups and the change feed follow by trigger. Idempotent; returns (ratings deleted, reports marked)."""
        return await self._repo.note_turns_removed(owner, conversation, ranges, trace_ids)

    async def delete(self, p: Principal, rid: str) -> None:
        """Deleting an absent (or another owner's) rating succeeds and changes nothing."""
        await self._repo.delete_rating(rid, p.sub)

    async def list(self, p: Principal, conversation: str, turn_index: int | None, f: RatingFilter,
                   after: tuple[int, int, str, str] | None, size: int) -> list[Rating]:
        """The caller's ratings of one conversation (optionally one turn) matching `f`, by turn, scope,
        aspect; at most `size` + 1 (one more tells the caller there is a next page)."""
        return await self._repo.list_ratings(p.sub, conversation, turn_index, f, after, size + 1)

    async def list_every(self, p: Principal, f: RatingFilter, after: tuple[dt.datetime, str] | None,
                         size: int) -> list[Rating]:
        """The caller's ratings of every conversation matching `f`, newest first (update_time, id) after
        the keyset `after`; at most `size` + 1."""
        return await self._repo.list_owner_ratings(p.sub, f, after, size + 1)

    async def copy(self, p: Principal, source: str, target: str, through_turn_index: int,
                   request_id: uuid.UUID | None = None) -> int:
        """Copy the caller's ratings of turns ≤ through_turn_index onto a fork, marked BRANCH_COPY. A
        MESSAGE rating is copied only onto a fork turn that has a stored non-empty assistant message,
        and then names that message. Idempotent (an existing rating on the fork is kept); with a
        `request_id` a retry copies nothing, even after the copies were edited or deleted (the id is
        kept 24 h). NOT_FOUND unless both are the caller's; UNAVAILABLE when the chat service is down."""
        try:
            await self._chat.check_instance(source, p.metadata, "source_conversation")
            replies = await self._chat.replies_through(target, p.metadata, through_turn_index, "target_conversation")
        except ChatUnreachable as e:
            raise e.unavailable("to check the conversations") from None
        try:
            return await self._repo.copy_ratings(p.sub, source, target, through_turn_index, replies, request_id)
        except TurnRemoved:  # a fork turn removed while this copy ran
            raise _removed(target, through_turn_index) from None


def _removed(conversation: str, turn_index: int) -> NotFound:
    """NOT_FOUND naming a turn removed in chat (DeleteTurn / Clear chat), as chat itself answers."""
    return NotFound(f"{conversation} turn {turn_index}", reason="TURN_REMOVED",
                    explanation="the turn was deleted in chat")
