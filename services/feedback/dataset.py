"""Dataset export, the use case (issue 24): the caller's labelled turns as training / evaluation records.

A labelled turn is a (conversation, turn) with at least one of the caller's ratings matching the filter.
Its record holds the conversation up to the turn's user message and the rated reply (from the chat service,
read with the caller's token: ownership lives there), every rating of the turn, the caller's reports on it
and the tool calls frozen into them. Pages of PAGE turns (keyset on (conversation, turn)); per page one
read of each conversation's messages; nothing more than one page is held, so millions of rows stream.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass

from services.common.auth import Principal
from services.common.errors import NotFound, Unavailable
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.domain import MessageView
from services.feedback.model.enums import RatingSentiment
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report
from services.feedback.repository.dataset import DatasetStore

PAGE = 100


@dataclass(frozen=True, slots=True)
class DatasetFilter:
    conversation: str = ""
    aspect: str = ""
    sentiment: RatingSentiment = RatingSentiment.UNSPECIFIED
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    include_branch_copies: bool = False


@dataclass(frozen=True, slots=True)
class LabelledTurn:
    conversation: str
    turn_index: int
    prompt: tuple[MessageView, ...]
    reply: MessageView
    ratings: tuple[Rating, ...]
    reports: tuple[Report, ...]


class Datasets:
    def __init__(self, store: DatasetStore, chat: ChatClient):
        self._store, self._chat = store, chat

    async def export(self, p: Principal, f: DatasetFilter, after: tuple[str, int]) -> AsyncIterator[LabelledTurn]:
        """Every labelled turn after `after` ((conversation, turn); ("", -1) = from the start), in order.
        A turn whose reply is gone (cleared, deleted) or whose conversation was deleted is skipped.
        UNAVAILABLE (CHAT_UNAVAILABLE) when the chat service cannot be reached."""
        while True:
            turns = await self._store.labelled_turns(p.sub, f.conversation, f.aspect, f.sentiment, f.start_time,
                                                     f.end_time, f.include_branch_copies, after, PAGE)
            if not turns:
                return
            ratings, reports = await self._store.turn_labels(p.sub, turns, f.include_branch_copies)
            through: dict[str, int] = {}
            for c, k in turns:
                through[c] = max(k, through.get(c, k))
            messages: dict[str, list[MessageView]] = {}
            for c, k in through.items():
                try:
                    messages[c] = await self._chat.messages_through(c, p.metadata, k)
                except NotFound:
                    messages[c] = []
                except ChatUnreachable:
                    raise Unavailable("the chat service cannot be reached to read the conversations; resume "
                                      "with the last resume_token", retry_after_s=1.0, reason="CHAT_UNAVAILABLE") from None
            for c, k in turns:
                turn = [m for m in messages[c] if m.turn_index == k]
                reply = next((m for m in turn if m.role == "ROLE_ASSISTANT" and m.content), None)
                if reply is None:
                    continue
                prompt = tuple(m for m in messages[c] if m.turn_index < k or (m.turn_index == k and m.role == "ROLE_USER"))
                yield LabelledTurn(c, k, prompt, reply,
                                   tuple(r for r in ratings if (r.key.conversation, r.key.turn_index) == (c, k)),
                                   tuple(r for r in reports if (r.anchor.instance, r.snapshot.turn_index) == (c, k)))
            after = turns[-1]
            if len(turns) < PAGE:
                return
