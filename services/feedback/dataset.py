"""Dataset export, the use case (issue 24): the caller's labelled turns as training / evaluation records.

A labelled turn is a (conversation, turn) with at least one of the caller's ratings, or one evaluation of
it another system sent (AcceptEvaluations), matching the filter (author kind among them). Its record holds the conversation up to the turn's user message and the rated reply (from the chat service,
read with the caller's token: ownership lives there), every rating and evaluation of the turn, the caller's reports on it
and the tool calls frozen into them. Pages of PAGE turns (keyset on (conversation, turn)); per page one
read of each conversation's messages; nothing more than one page is held, so millions of rows stream.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass

from services.common.auth import Principal
from services.common.errors import NotFound
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.domain import MessageView
from services.feedback.model.enums import AuthorKind, RatingScope, RatingSentiment
from services.feedback.model.evaluation import StoredEvaluation
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report
from services.feedback.repository.dataset import DatasetStore

PAGE = 100
# Which of two sentiments is preferred (preference pairs).
_RANK = {RatingSentiment.POSITIVE: 2, RatingSentiment.NEUTRAL: 1, RatingSentiment.NEGATIVE: 0}


@dataclass(frozen=True, slots=True)
class DatasetFilter:
    conversation: str = ""
    aspect: str = ""
    sentiment: RatingSentiment = RatingSentiment.UNSPECIFIED
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    include_branch_copies: bool = False
    # UNSPECIFIED: any; HUMAN: the owner's ratings and HUMAN evaluations; LLM / CODE: evaluations of that kind.
    author_kind: AuthorKind = AuthorKind.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class LabelledTurn:
    conversation: str
    turn_index: int
    prompt: tuple[MessageView, ...]
    reply: MessageView
    ratings: tuple[Rating, ...]
    reports: tuple[Report, ...]
    # Other systems' evaluations of the turn (AcceptEvaluations), by name, identifier.
    evaluations: tuple[StoredEvaluation, ...] = ()


@dataclass(frozen=True, slots=True)
class PreferencePair:
    """`prompt` the shared conversation, `chosen` / `rejected` the two branches' turn k (see
    Datasets.preference_pairs)."""

    prompt: tuple[MessageView, ...]
    chosen: tuple[MessageView, ...]
    rejected: tuple[MessageView, ...]
    aspect: str
    chosen_conversation: str
    rejected_conversation: str
    turn_index: int
    chosen_rating: Rating
    rejected_rating: Rating


def _turn(messages: list[MessageView], k: int) -> tuple[MessageView, MessageView] | None:
    """Turn k's user message and non-empty reply, or None."""
    user = next((m for m in messages if m.turn_index == k and m.role == "ROLE_USER"), None)
    reply = next((m for m in messages if m.turn_index == k and m.role == "ROLE_ASSISTANT" and m.content), None)
    return (user, reply) if user is not None and reply is not None else None


def pair_of(prefix: list[MessageView], a: tuple[MessageView, MessageView], b: tuple[MessageView, MessageView]
            ) -> tuple[tuple[MessageView, ...], tuple[MessageView, ...], tuple[MessageView, ...]]:
    """(prompt, a's side, b's side): the shared prefix, plus the turn's user message when both branches
    asked the same (then each side is its reply alone), else each side is its user message and reply."""
    if a[0].content == b[0].content:
        return (*prefix, a[0]), (a[1],), (b[1],)
    return tuple(prefix), a, b


class Datasets:
    def __init__(self, store: DatasetStore, chat: ChatClient):
        self._store, self._chat = store, chat

    async def export(self, p: Principal, f: DatasetFilter, after: tuple[str, int]) -> AsyncIterator[LabelledTurn]:
        """Every labelled turn after `after` ((conversation, turn); ("", -1) = from the start), in order.
        A turn whose reply is gone (cleared, deleted) or whose conversation was deleted is skipped.
        UNAVAILABLE (CHAT_UNAVAILABLE) when the chat service cannot be reached."""
        while True:
            turns = await self._store.labelled_turns(p.sub, f.conversation, f.aspect, f.sentiment, f.author_kind,
                                                     f.start_time, f.end_time, f.include_branch_copies, after, PAGE)
            if not turns:
                return
            ratings, reports = await self._store.turn_labels(p.sub, turns, f.include_branch_copies)
            evaluations = await self._store.turn_evaluations(p.sub, turns)
            through: dict[str, int] = {}
            for c, k in turns:
                through[c] = max(k, through.get(c, k))
            messages: dict[str, list[MessageView]] = {}
            for c, k in through.items():
                try:
                    messages[c] = await self._chat.messages_through(c, p.metadata, k)
                except NotFound:
                    messages[c] = []
                except ChatUnreachable as e:
                    raise e.unavailable("to read the conversations (resume with the last resume_token)") from None
            for c, k in turns:
                turn = [m for m in messages[c] if m.turn_index == k]
                reply = next((m for m in turn if m.role == "ROLE_ASSISTANT" and m.content), None)
                if reply is None:
                    continue
                prompt = tuple(m for m in messages[c] if m.turn_index < k or (m.turn_index == k and m.role == "ROLE_USER"))
                yield LabelledTurn(c, k, prompt, reply,
                                   tuple(r for r in ratings if (r.key.conversation, r.key.turn_index) == (c, k)),
                                   tuple(r for r in reports if (r.anchor.instance, r.snapshot.turn_index) == (c, k)),
                                   tuple(e for e in evaluations if (e.anchor.conversation, e.anchor.turn_index) == (c, k)))
            after = turns[-1]
            if len(turns) < PAGE:
                return

    async def preference_pairs(self, p: Principal, aspect: str) -> AsyncIterator[PreferencePair]:
        """For each of the caller's forks (made after turn j of its source), the aspects on which the caller
        rated the two branches' replies at turn k = j + 1 differently (MESSAGE scope, USER origin: branch
        copies never count; only the owner's own ratings, never other systems' evaluations, which live
        apart and are not read here): the preferred reply is `chosen`. Forks in the chat service's order."""
        try:
            forks = await self._chat.forks(p.metadata)
        except ChatUnreachable as e:
            raise e.unavailable("to list the forks") from None
        for fork, source, j in forks:
            k = j + 1
            ratings, _ = await self._store.turn_labels(p.sub, [(fork, k), (source, k)], with_copies=False)
            by_aspect: dict[str, dict[str, Rating]] = {}
            for r in ratings:
                if r.key.scope == RatingScope.MESSAGE and r.sentiment in _RANK and (not aspect or r.key.aspect == aspect):
                    by_aspect.setdefault(r.key.aspect, {})[r.key.conversation] = r
            judged = [(a, d[fork], d[source]) for a, d in sorted(by_aspect.items())
                      if fork in d and source in d and _RANK[d[fork].sentiment] != _RANK[d[source].sentiment]]
            if not judged:
                continue
            try:
                fork_msgs = await self._chat.messages_through(fork, p.metadata, k)
                source_msgs = await self._chat.messages_through(source, p.metadata, k)
            except NotFound:
                continue
            except ChatUnreachable as e:
                raise e.unavailable("to read the conversations") from None
            a, b = _turn(fork_msgs, k), _turn(source_msgs, k)
            if a is None or b is None:
                continue
            prompt, fork_side, source_side = pair_of([m for m in source_msgs if m.turn_index <= j], a, b)
            for name, rf, rs in judged:
                fork_wins = _RANK[rf.sentiment] > _RANK[rs.sentiment]
                yield PreferencePair(prompt, fork_side if fork_wins else source_side,
                                     source_side if fork_wins else fork_side, name, fork if fork_wins else source,
                                     source if fork_wins else fork, k, rf if fork_wins else rs, rs if fork_wins else rf)
