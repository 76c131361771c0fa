"""The feedback service's enums, with the proto's numbers (`agentfeedback.feedback.v1`):
`tests/unit/test_feedback_model.py` ties each to its proto enum, member by member. Shared by every
aggregate of the model.
"""
from __future__ import annotations

from enum import IntEnum
from typing import TypeVar

E = TypeVar("E", bound=IntEnum)
_MEMBERS: dict[type, dict[int, IntEnum]] = {}


def member(enum_type: type[E], value: int) -> E:
    """`enum_type(value)` (ValueError for a number it lacks) from a dict of its members made once:
    ≈ 0.05 µs where calling the enum takes ≈ 0.45 (a rating put converts seven)."""
    members = _MEMBERS.get(enum_type)
    if members is None:
        members = _MEMBERS[enum_type] = {m.value: m for m in enum_type}
    got = members.get(value)
    return enum_type(value) if got is None else got  # type: ignore[return-value]


class Surface(IntEnum):
    UNSPECIFIED = 0
    CHAT = 1
    CODING = 2
    BOARD = 3
    APPLY = 4
    OTHER = 5


class Author(IntEnum):
    UNSPECIFIED = 0
    USER = 1
    AGENT = 2
    PLATFORM = 3


class Sentiment(IntEnum):
    UNSPECIFIED = 0
    GOOD = 1
    BAD = 2


class Category(IntEnum):
    """An unknown number 7..32767 (a newer client's) is a pseudo-member `UNKNOWN_<n>`: stored (issue 13)."""

    UNSPECIFIED = 0
    BROKEN_RESPONSE = 1
    NETWORK = 2
    TOOL_FAILURE = 3
    RENDERING = 4
    UNSAFE_CONTENT = 5
    OTHER = 6

    @classmethod
    def _missing_(cls, value: object) -> Category | None:
        if isinstance(value, int) and 0 <= value <= 32767:  # the column is a smallint
            member = int.__new__(cls, value)
            member._name_, member._value_ = f"UNKNOWN_{value}", value
            return member
        return None

    def __reduce_ex__(self, proto: object) -> tuple:
        # Copy and pickle by value: Python 3.11.2's Enum does it by name, and a pseudo-member's name is
        # no attribute (deepcopy in a list's filters raised AttributeError → INTERNAL; the fuzz found it).
        return self.__class__, (self._value_,)


class Status(IntEnum):
    UNSPECIFIED = 0
    OPEN = 1
    TRIAGED = 2
    FILED = 3
    DISMISSED = 4


class SnapshotSource(IntEnum):
    UNSPECIFIED = 0
    CHAT_SERVICE = 1
    CLIENT = 2
    NONE = 3


class TraceState(IntEnum):
    """proto `TraceSnapshotState`; UNSPECIFIED also means "no trace to capture" (no trace id)."""

    UNSPECIFIED = 0
    PENDING = 1
    CAPTURED = 2
    UNAVAILABLE = 3
    EXPIRED = 4


class RatingScope(IntEnum):
    UNSPECIFIED = 0
    MESSAGE = 1
    OBJECTIVE = 2
    PLAN = 3
    ARTIFACT = 4
    PREFERENCES = 5
    CONVERSATION = 6


class RatingSentiment(IntEnum):
    UNSPECIFIED = 0
    POSITIVE = 1
    NEUTRAL = 2
    NEGATIVE = 3


class RatingOrigin(IntEnum):
    UNSPECIFIED = 0
    USER = 1
    BRANCH_COPY = 2


class AuditAction(IntEnum):
    UNSPECIFIED = 0
    UPDATE_FEEDBACK = 1
    FILE_FEEDBACK = 2
    DELETE_FEEDBACK = 3
    RESOLVE_FEEDBACK = 4
    READ_BODY = 5
    CLAIM_FEEDBACK = 6  # ClaimFeedback (the review queue)
    RELEASE_FEEDBACK = 7


# model enum → proto enum name (agentfeedback.feedback.v1); the proto's values are `<UPPER_SNAKE>_<member>`.
class EventKind(IntEnum):
    """What a change feed event is about (also `feed_events.kind`, migrations 0030 and 0090)."""

    UNSPECIFIED = 0
    FEEDBACK = 1
    RATING = 2
    EVALUATION = 3  # another system's, AcceptEvaluations (`evaluations/{id}`)


class EventType(IntEnum):
    """How it changed (also `feed_events.action`, migration 0030)."""

    UNSPECIFIED = 0
    CREATED = 1
    UPDATED = 2
    DELETED = 3
    FILED = 4


class AuthorKind(IntEnum):
    """Who made a judgement (issue 24; OpenInference `annotator_kind`): owners' ratings are HUMAN."""

    UNSPECIFIED = 0
    HUMAN = 1
    LLM = 2
    CODE = 3


class EvaluationConvention(IntEnum):
    UNSPECIFIED = 0
    GEN_AI_EVENT = 1
    OPENINFERENCE = 2


PROTO_ENUMS: dict[type[IntEnum], str] = {
    Surface: "Surface", Author: "Author", Sentiment: "Sentiment", Category: "Category", Status: "Status",
    SnapshotSource: "SnapshotSource", TraceState: "TraceSnapshotState", RatingScope: "RatingScope",
    RatingSentiment: "RatingSentiment", RatingOrigin: "RatingOrigin", AuditAction: "AuditAction",
    EventKind: "FeedbackEventKind", EventType: "FeedbackEventType", AuthorKind: "AuthorKind",
    EvaluationConvention: "EvaluationConvention",
}
