"""AcceptEvaluations, the use case (issue 24): evaluations other systems sent over OTLP, handed over
by the trace collector with its own credential (`feedback:evaluations`), become ratings with an author
kind, anchored to the turn whose trace they name.

Steps: each evaluation's shape is checked (a bad one is REJECTED, the others go on); the turns of their
trace ids are looked up at the chat service in one call with the caller's token (across owners:
ChatService.LookupTurns needs the same scope); the known ones are upserted on (scope, target, name,
identifier) — a repeat is a no-op, a change a new version; the unknown ones are PENDING_TURN and nothing
is stored: the collector keeps them (its outbox) and sends them again until the turn appears or its
pending retention ends (services/tracecollector/README.md "Evaluations").
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from services.common.auth import Principal
from services.feedback import domain
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.model.evaluation import EvaluationCount, EvaluationIn, StoredEvaluation
from services.feedback.repository.evaluations import EvaluationStore

ACCEPTED, PENDING_TURN, REJECTED = 1, 2, 3  # EvaluationOutcome.State


@dataclass(frozen=True, slots=True)
class Outcome:
    state: int
    stored: StoredEvaluation | None = None
    reason: str = ""


class Evaluations:
    def __init__(self, store: EvaluationStore, chat: ChatClient):
        self._store = store
        self._chat = chat

    async def accept(self, p: Principal, items: list[EvaluationIn | str]) -> list[Outcome]:
        """One outcome per item, in order; a `str` item is a rejection reason (the codec's check).
        UNAVAILABLE (CHAT_UNAVAILABLE, or DATABASE_UNAVAILABLE when it is chat's database) when the chat
        service cannot be reached: nothing is stored."""
        valid = [e for e in items if isinstance(e, EvaluationIn)]
        anchors = {}
        if valid:
            try:
                anchors = await self._chat.lookup_turns(sorted({e.trace_id for e in valid}), p.metadata)
            except ChatUnreachable as e:
                raise e.unavailable("to find the evaluated turns") from None
        known = [e for e in valid if e.trace_id in anchors]
        stored = iter(await self._store.put(
            [(e, anchors[e.trace_id], domain.evaluation_sentiment(e.label, e.score)) for e in known]))
        out = []
        for e in items:
            if isinstance(e, str):
                out.append(Outcome(REJECTED, reason=e))
            elif e.trace_id in anchors:
                out.append(Outcome(ACCEPTED, next(stored)))
            else:
                out.append(Outcome(PENDING_TURN))
        return out

    async def of_turn(self, conversation: str, turn_index: int) -> list[StoredEvaluation]:
        """The evaluations of one turn (GetTurnFeedback), by name then identifier."""
        return await self._store.turn(conversation, turn_index)

    async def counts(self, since: dt.datetime) -> list[EvaluationCount]:
        """Per (author kind, name) since `since` (GetFeedbackStats), apart from the owners' figures."""
        return await self._store.counts(since)

