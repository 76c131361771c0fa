"""A report (CreateFeedback … FileFeedback): the report, its anchor, its snapshot of the turn and its
frozen trace; the validated requests (`ReportDraft`, `Change`, `ReportFilter`); the store's answers."""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.feedback.model.enums import (AuditAction, Author, Category, RatingScope, Sentiment, SnapshotSource, Status,
                                           Surface, TraceState)


@dataclass(frozen=True, slots=True)
class Context:
    """proto `FeedbackContext`: agent, model and voice provenance of the turn."""

    agent: str = ""
    model: str = ""
    audio_key: str = ""
    dictation: str = ""
    client_version: str = ""
    channel: str = ""


@dataclass(frozen=True, slots=True)
class Component:
    """Which workspace component a report is about (CreateFeedback `feedback.component`, checked)."""

    scope: RatingScope
    artifact_id: str = ""


@dataclass(frozen=True, slots=True)
class FrozenComponent:
    """The component as the report's turn left it (proto `FrozenComponent`; services.feedback.workspace_freeze).
    `frozen` False: named by a report made while the chat service was unreachable, not read."""

    scope: RatingScope
    artifact_id: str = ""
    turn_index: int = -1
    text: str = ""
    text_clipped: bool = False
    title: str = ""
    media_type: str = ""
    version: int = 0
    changed: bool = False
    frozen: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The turn as it was when the report was made (proto `Snapshot`). Texts are clipped
    (target ≤ 2000, preceding ≤ 1000 code points) and say so."""

    source: SnapshotSource = SnapshotSource.NONE
    target_role: str = ""
    target_text: str = ""
    target_text_clipped: bool = False
    target_time: dt.datetime | None = None
    preceding_user_text: str = ""
    preceding_user_text_clipped: bool = False
    trace_id: str = ""
    turn_index: int = 0
    context: Context = Context()
    unverified: bool = False
    component: FrozenComponent | None = None  # reports on a workspace component (issue 23)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of the turn, frozen from its span (proto `FrozenToolCall`); previews ≤ 2000 chars."""

    name: str = ""
    call_id: str = ""
    status: str = ""
    duration_ms: float = 0.0
    arguments: str = ""
    result: str = ""
    result_size_bytes: int = 0
    span_id: str = ""


@dataclass(frozen=True, slots=True)
class FrozenEvent:
    name: str = ""
    time: dt.datetime | None = None
    span_id: str = ""
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FrozenSpan:
    span_id: str = ""
    parent_span_id: str = ""
    name: str = ""
    service_name: str = ""
    status: str = ""
    duration_ms: float = 0.0
    start_offset_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class FrozenTrace:
    """The frozen copy of a turn's spans (the content part of proto `TraceSnapshot`)."""

    tool_calls: tuple[ToolCall, ...] = ()
    events: tuple[FrozenEvent, ...] = ()
    spans: tuple[FrozenSpan, ...] = ()
    root_status: str = ""
    duration_ms: float = 0.0
    # Non-empty: frozen incomplete after the settle wait; the parts that never arrived (`evidence.missing_parts`).
    missing: tuple[str, ...] = ()
    # Attribute values the collector had cut in the GetTrace answer this copy was frozen from (its answer
    # budget; traces.v1 `Trace.truncated_value_count`). 0: frozen from the spans as stored.
    truncated_value_count: int = 0


@dataclass(frozen=True, slots=True)
class TraceSnapshot:
    """proto `TraceSnapshot`: the capture's state and, once CAPTURED, the frozen copy.
    `spans_expired` is as of the read (the turn is older than the collector's retention)."""

    state: TraceState = TraceState.UNSPECIFIED
    frozen: FrozenTrace = FrozenTrace()
    attempts: int = 0
    capture_time: dt.datetime | None = None
    next_attempt_time: dt.datetime | None = None
    spans_expired: bool = False


@dataclass(frozen=True, slots=True)
class Anchor:
    """What a report points at: `kind` message (`message`), trace (`instance` + `trace_id`) or coding
    (`coding_session` + `coding_seq`)."""

    kind: str
    message: str = ""
    instance: str = ""
    trace_id: str = ""
    coding_session: str = ""
    coding_seq: int = 0


@dataclass(frozen=True, slots=True)
class Claim:
    """A review claim (ClaimFeedback): a lease on one report for one review session until `expire_time`."""

    claimant: str
    session: str
    expire_time: dt.datetime


@dataclass(frozen=True, slots=True)
class Report:
    """A stored report (proto `Feedback`). `turn_time`: when the rated turn happened (retention)."""

    id: str
    owner: str
    anchor: Anchor
    surface: Surface
    author: Author
    body: str
    sentiment: Sentiment
    category: Category
    snapshot: Snapshot
    trace: TraceSnapshot
    status: Status
    issue_url: str
    version: int
    create_time: dt.datetime
    update_time: dt.datetime
    turn_time: dt.datetime | None = None
    # AGENT reports: the trace id of the turn in which the owner spoke the complaint (issue 13).
    context_trace_id: str = ""
    # When the reported turn was removed in chat (NoteTurnsRemoved); None while it exists.
    turn_removed_time: dt.datetime | None = None
    # The live review claim, when the read asked for it (Claims.attach); None when free or expired.
    claim: Claim | None = None

    @property
    def name(self) -> str:
        return f"feedback/{self.id}"


@dataclass(frozen=True, slots=True)
class NewReport:
    """A report to store (CreateFeedback), decided by `reports.create`. `trace_state` is PENDING when
    the turn's spans are to be frozen; `copy_sibling`: a report of the same owner on the same turn that
    is already CAPTURED lends its frozen copy (the new row is born CAPTURED); `capture_due`: the capture
    worker should look now; `verify_due`: a CLIENT snapshot waits for the chat service's;
    `authoritative`: the trace id came from the chat service (the `feedback.created` event is due)."""

    id: str
    owner: str
    request_id: uuid.UUID
    fingerprint: bytes
    anchor: Anchor
    surface: Surface
    author: Author
    body: str
    sentiment: Sentiment
    category: Category
    snapshot: Snapshot
    turn_time: dt.datetime | None
    trace_state: TraceState
    copy_sibling: bool = False
    capture_due: bool = False
    verify_due: bool = False
    authoritative: bool = False
    context_trace_id: str = ""


@dataclass(frozen=True, slots=True)
class Stored:
    """`ReportStore.insert_report`'s answer: the row stored under the request id (`report.id` is the new
    id unless a concurrent call with that request id stored first), with its request fingerprint and
    whether this insert made its `feedback.created` event due."""

    report: Report
    fingerprint: bytes | None
    event_due: bool
    counted: int | None = None  # a capped insert: the owner's reports before it (at most the cap)


@dataclass(frozen=True, slots=True)
class OverCap:
    """`ReportStore.insert_report(…, cap=n)`'s answer when the owner already has n reports stored:
    nothing was written."""

    cap: int


@dataclass(frozen=True, slots=True)
class DeletedCreate:
    """A create request id whose report was deleted: the id it made and its request fingerprint."""

    feedback_id: str
    fingerprint: bytes | None


@dataclass(frozen=True, slots=True)
class CreatedEvent:
    """The fields of the `feedback.created` span event (never the body)."""

    id: str
    trace_id: str
    sentiment: Sentiment
    category: Category
    author: Author
    message: str
    instance: str


@dataclass(frozen=True, slots=True)
class ReportFilter:
    """ListFeedback's filters (empty / 0 / None = not applied)."""

    instance: str = ""
    status: Status = Status.UNSPECIFIED
    author: Author = Author.UNSPECIFIED
    sentiment: Sentiment = Sentiment.UNSPECIFIED
    category: Category = Category.UNSPECIFIED
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    text: str = ""
    trace_id: str = ""


@dataclass(frozen=True)
class ReportDraft:
    """A CreateFeedback request, validated. `client_snapshot`: the client's copy of the turn (used only
    when the chat service cannot be reached), checked and clipped; its trace id parsed."""

    request_id: uuid.UUID
    fingerprint: bytes
    anchor: Anchor
    surface: Surface
    author: Author
    body: str
    sentiment: Sentiment
    category: Category
    client_version: str = ""
    client_snapshot: Snapshot | None = None
    actor: str | None = None  # the `x-agentfeedback-actor` metadata value (AUTHOR_AGENT needs it)
    context_trace_id: str = ""  # AUTHOR_AGENT: the turn in which the complaint was spoken
    component: Component | None = None  # the workspace component the report is about (issue 23)


@dataclass(frozen=True)
class Change:
    """An UpdateFeedback request, validated: the fields the mask names (None: not in the mask)."""

    etag: str
    status: Status | None
    issue_url: str | None
    request_id: uuid.UUID | None
    fingerprint: bytes | None
    action: AuditAction = AuditAction.UPDATE_FEEDBACK  # RESOLVE when the MCP server's resolve_feedback says so
    actor: str | None = None  # the `x-agentfeedback-actor` metadata value (a RESOLVE needs the MCP server's)
    session: str = ""  # the caller's review session (`review_session`): triage under its own claim
