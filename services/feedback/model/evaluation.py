"""An evaluation another system sent over OTLP (issue 24, AcceptEvaluations): as received and checked,
the turn it is anchored to, and as stored (a rating with an author kind)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from services.feedback.model.enums import AuthorKind, EvaluationConvention, RatingScope, RatingSentiment


@dataclass(frozen=True, slots=True)
class EvaluationIn:
    """One checked evaluation. Unique by (scope, target = `trace_id`, `name`, `identifier`)."""

    trace_id: str
    name: str
    label: str
    score: float | None
    explanation: str
    response_id: str
    author_kind: AuthorKind
    identifier: str
    source: str
    convention: EvaluationConvention
    scope: RatingScope = RatingScope.MESSAGE


@dataclass(frozen=True, slots=True)
class TurnAnchor:
    """The turn a trace id names (ChatService.LookupTurns): its conversation, index, owner, reply."""

    conversation: str
    turn_index: int
    owner: str
    reply: str


@dataclass(frozen=True, slots=True)
class StoredEvaluation:
    id: str
    evaluation: EvaluationIn
    anchor: TurnAnchor
    sentiment: RatingSentiment
    version: int
    create_time: dt.datetime
    update_time: dt.datetime

    @property
    def name(self) -> str:
        return f"evaluations/{self.id}"


@dataclass(frozen=True, slots=True)
class EvaluationCount:
    """GetFeedbackStats' evaluations: one (author kind, name) over the window."""

    author_kind: AuthorKind
    name: str
    positive: int
    neutral: int
    negative: int
    total: int
    mean_score: float | None
