"""The capture worker's jobs: a report whose turn's spans are to be frozen, a client snapshot to verify."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from services.feedback.model.enums import TraceState
from services.feedback.model.report import Anchor


@dataclass(frozen=True, slots=True)
class CaptureJob:
    """A PENDING row the worker claimed: look at its trace once."""

    id: str
    owner: str
    trace_id: str
    turn_time: dt.datetime | None
    attempts: int
    span_count: int
    # CAPTURED: a copy frozen incomplete, looked at again in case its missing spans arrive.
    state: TraceState = TraceState.PENDING


@dataclass(frozen=True, slots=True)
class VerifyJob:
    """A CLIENT-snapshot row the worker claimed: verify its anchor with the chat service as the owner."""

    id: str
    owner: str
    anchor: Anchor
