"""The change feed's part of the feedback model (issue 24): positions, events and a watcher's filter.
Its enums (`EventKind`, `EventType`) live with the others in `model/enums.py`."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from services.feedback.model.enums import EventKind, EventType, RatingScope
from services.feedback.model.evaluation import StoredEvaluation
from services.feedback.model.rating import Rating
from services.feedback.model.report import Report


_COLLECTIONS = {EventKind.FEEDBACK: "feedback", EventKind.RATING: "ratings", EventKind.EVALUATION: "evaluations"}


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A place in the feed: after every event (xid, seq) ≤ it. `xid` is the writing transaction's id,
    `seq` the event's order; (xid, 0) is "before every event of transaction xid and later ones"."""

    xid: int
    seq: int


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One outbox row: what changed (kind, resource id, owner), how, when; not the resource itself."""

    position: Position
    kind: EventKind
    type: EventType
    resource_id: str
    owner: str
    scope: RatingScope
    aspect: str
    branch_copy: bool
    change_time: dt.datetime

    @property
    def id(self) -> str:
        return str(self.position.seq)

    @property
    def name(self) -> str:
        return f"{_COLLECTIONS[self.kind]}/{self.resource_id}"


@dataclass(frozen=True, slots=True)
class FeedFilter:
    """Which events one watcher receives. `owner` '' = every owner (admins only; decided by the use case)."""

    owner: str = ""
    kind: EventKind = EventKind.UNSPECIFIED
    scope: RatingScope = RatingScope.UNSPECIFIED
    aspect: str = ""


@dataclass(frozen=True, slots=True)
class FeedPage:
    """One read of the feed: events after a position, in order, and where the reader may continue
    from (`through`: at or after the last event; every matching event before it was in this page)."""

    events: tuple[FeedEvent, ...]
    through: Position
    # Committed events exist beyond the safe horizon (a transaction begun earlier is still running):
    # the reader should look again soon, not wait for the next wake-up.
    pending: bool


@dataclass(frozen=True, slots=True)
class FeedResources:
    """The resources a page of events names, by id, as they are now (a deleted one is absent)."""

    reports: dict[str, Report]
    ratings: dict[str, Rating]
    evaluations: dict[str, StoredEvaluation]

    def item_of(self, e: FeedEvent) -> tuple[Report | None, Rating | None, StoredEvaluation | None]:
        """(report, rating, evaluation) of one event: the one its kind names, or all None."""
        return (self.reports.get(e.resource_id) if e.kind == EventKind.FEEDBACK else None,
                self.ratings.get(e.resource_id) if e.kind == EventKind.RATING else None,
                self.evaluations.get(e.resource_id) if e.kind == EventKind.EVALUATION else None)
