"""Pure rules of the feedback service: limits, snapshots, status transitions, etags, what a new
report needs from the capture worker, rating checks and statistics windows.

No gRPC, no SQL here: the use cases (`reports.py`, `ratings.py`, `statistics.py`, `capture.py`) call
these on the model (`model/`); the frozen copy of a turn's spans is `evidence.py`, the ticket
draft `ticket.py`. Sources of the numbers: docs/architecture.md and the proto's comments.
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from services.common.clip import clip as echo
from services.common.clip import truncate
from services.common.errors import Aborted, FailedPrecondition, InvalidArgument, Violations
from services.common.etags import etag
from services.common.ids import check_text
from services.feedback.model.enums import (
    Author,
    RatingOrigin,
    RatingScope,
    RatingSentiment,
    Sentiment,
    SnapshotSource,
    Status,
    TraceState,
)
from services.feedback.model.rating import Rating, RatingKey
from services.feedback.model.report import Context, Report, Snapshot
from services.feedback.model.statistics import DailyCount
from services.feedback.urls import split_http_url

# Limits (the proto's field comments).
BODY_MAX_CHARS = 4000
TARGET_TEXT_MAX_CHARS = 2000
PRECEDING_TEXT_MAX_CHARS = 1000
# A client snapshot's one-line fields, in code points: what the chat service itself would have given
# (roles and channels are enum names; an audio key is at most the chat service's MAX_AUDIO_KEY_CHARS; a
# dictation at most its default AGENTFEEDBACK_CHAT_MAX_CONTENT_CHARS). client_version is checked (200)
# where the request is parsed (codec.create_feedback).
CLIENT_SNAPSHOT_FIELD_MAX_CHARS = {
    "target_role": 64, "context.agent": 200, "context.model": 200, "context.channel": 64,
    "context.audio_key": 1024, "context.dictation": 32000,
}

# Short names of the model's enum members the rules use most.
AUTHOR_USER, AUTHOR_AGENT = Author.USER, Author.AGENT
STATUS_OPEN, STATUS_TRIAGED, STATUS_FILED, STATUS_DISMISSED = (Status.OPEN, Status.TRIAGED, Status.FILED,
                                                               Status.DISMISSED)
SOURCE_CHAT, SOURCE_CLIENT, SOURCE_NONE = SnapshotSource.CHAT_SERVICE, SnapshotSource.CLIENT, SnapshotSource.NONE
TRACE_NONE, TRACE_PENDING, TRACE_CAPTURED, TRACE_UNAVAILABLE, TRACE_EXPIRED = tuple(TraceState)
SCOPE_MESSAGE, SCOPE_ARTIFACT = RatingScope.MESSAGE, RatingScope.ARTIFACT
ORIGIN_USER, ORIGIN_BRANCH_COPY = RatingOrigin.USER, RatingOrigin.BRANCH_COPY
RATING_POSITIVE, RATING_NEUTRAL, RATING_NEGATIVE = (RatingSentiment.POSITIVE, RatingSentiment.NEUTRAL,
                                                    RatingSentiment.NEGATIVE)
SENTIMENT_BAD = Sentiment.BAD

STATUS_NAMES = {1: "OPEN", 2: "TRIAGED", 3: "FILED", 4: "DISMISSED"}

# Status machine (proto UpdateFeedback comment): OPEN → TRIAGED → FILED | DISMISSED; OPEN may also be
# dismissed or filed directly (a triager who already knows); any state may be reopened to OPEN.
_TRANSITIONS: dict[int, frozenset[int]] = {
    STATUS_OPEN: frozenset({STATUS_TRIAGED, STATUS_FILED, STATUS_DISMISSED}),
    STATUS_TRIAGED: frozenset({STATUS_FILED, STATUS_DISMISSED, STATUS_OPEN}),
    STATUS_FILED: frozenset({STATUS_OPEN}),
    STATUS_DISMISSED: frozenset({STATUS_OPEN}),
}
UPDATABLE_PATHS = frozenset({"status", "issue_url"})
# PutRating's default mask (as before reasons and choice existed) and every path a call may own.
RATING_MASK_PATHS = frozenset({"sentiment", "category", "note"})
RATING_OWNABLE_PATHS = RATING_MASK_PATHS | {"reasons", "choice"}
ASPECT_SLUG = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")


class Stale(Aborted):
    """ABORTED on a stale etag (AIP-154). `item`: the stored report or rating as it is now (the model's),
    which the servicer puts in the error's details as its proto."""

    def __init__(self, etag_sent: str, item: Report | Rating):
        super().__init__(f"etag {echo(etag_sent)} is stale; the current one is {etag(item.version, item.id)}")
        self.item = item


# ---------------------------------------------------------------- reports
def check_body(body: str) -> str:
    """The owner's words: required, no NUL, ≤ 4000 Unicode code points (never clipped).

    Raises InvalidArgument naming `feedback.body` (and the limit when over it).
    """
    return check_text(body, "feedback.body", BODY_MAX_CHARS, required=True)


@dataclass(frozen=True)
class MessageView:
    """A chat message as the feedback service needs it (from ChatService.Message)."""

    name: str
    role: str  # ROLE_USER / ROLE_ASSISTANT
    content: str
    trace_id: str
    turn_index: int
    create_time: dt.datetime | None
    channel: str = ""
    audio_key: str = ""
    dictation: str = ""
    model: str = ""
    agent: str = ""


@dataclass(frozen=True)
class DefectView:
    """A suspected defect as the feedback service needs it (from ChatService.SuspectedDefect)."""

    event: str  # the first signal's span event / status name, e.g. `chat.truncated`
    turn_index: int
    tools: tuple[str, ...]  # tool names the agent reported
    kinds: tuple[str, ...]  # DefectKind names, e.g. DEFECT_KIND_TRUNCATED; stable order, at least one


def instance_of(message_name: str) -> str:
    """`instances/{i}/messages/{m}` → `instances/{i}`."""
    return "/".join(message_name.split("/")[:2])


def pick_target(turn: Sequence[MessageView]) -> MessageView | None:
    """For a trace-id target: the turn's reply when stored, else its user message."""
    replies = [m for m in turn if m.role == "ROLE_ASSISTANT"]
    if replies:
        return replies[-1]
    users = [m for m in turn if m.role == "ROLE_USER"]
    return users[0] if users else None


def build_snapshot(target: MessageView, turn: Sequence[MessageView], client_version: str = "") -> Snapshot:
    """The authoritative snapshot: the target (≤ 2000 chars), the user message that preceded it in
    its turn (≤ 1000; the target itself when it is the user's), trace id, turn index, context with
    voice provenance. Clipped texts say so.
    """
    user = target if target.role == "ROLE_USER" else next((m for m in turn if m.role == "ROLE_USER"), None)
    text, text_clipped = truncate(target.content, TARGET_TEXT_MAX_CHARS)
    prev, prev_clipped = truncate(user.content if user else "", PRECEDING_TEXT_MAX_CHARS)
    voice = user or target
    return Snapshot(
        source=SOURCE_CHAT, target_role=target.role, target_text=text, target_text_clipped=text_clipped,
        preceding_user_text=prev, preceding_user_text_clipped=prev_clipped, trace_id=target.trace_id,
        turn_index=target.turn_index, target_time=target.create_time,
        context=Context(
            agent=target.agent or voice.agent,
            model=next((m.model for m in turn if m.model), target.model),
            audio_key=target.audio_key or voice.audio_key,
            dictation=target.dictation or voice.dictation,
            client_version=client_version,
            channel=voice.channel,
        ),
    )


def client_snapshot(snap: Snapshot, field_path: str = "client_snapshot") -> Snapshot:
    """A client-supplied snapshot (chat service unreachable): texts checked for NUL and clipped,
    marked SNAPSHOT_SOURCE_CLIENT. Raises InvalidArgument naming the field on NUL bytes, and on a
    role or context field longer than CLIENT_SNAPSHOT_FIELD_MAX_CHARS (those are not evidence to
    clip: the chat service never sends them longer).
    """
    c = snap.context
    values = {"target_role": snap.target_role, "context.agent": c.agent, "context.model": c.model,
              "context.channel": c.channel, "context.audio_key": c.audio_key, "context.dictation": c.dictation}
    for name, value in values.items():
        # NUL here reached PostgreSQL (INTERNAL), and nothing bounded them (a 3 MB snapshot was stored).
        check_text(value, f"{field_path}.{name}", CLIENT_SNAPSHOT_FIELD_MAX_CHARS[name])
    target, target_clipped = truncate(check_text(snap.target_text, f"{field_path}.target_text"), TARGET_TEXT_MAX_CHARS)
    prev, prev_clipped = truncate(check_text(snap.preceding_user_text, f"{field_path}.preceding_user_text"),
                              PRECEDING_TEXT_MAX_CHARS)
    return replace(snap, source=SOURCE_CLIENT, target_text=target,
                   target_text_clipped=snap.target_text_clipped or target_clipped, preceding_user_text=prev,
                   preceding_user_text_clipped=snap.preceding_user_text_clipped or prev_clipped, unverified=False)


@dataclass(frozen=True)
class CapturePlan:
    """What a new report asks of the capture worker (see model.NewReport)."""

    trace_state: TraceState
    copy_sibling: bool
    capture_due: bool
    verify_due: bool
    authoritative: bool


def capture_plan(source: SnapshotSource, trace_id: str) -> CapturePlan:
    """A new report's capture plan. A CHAT_SERVICE snapshot with a trace id: PENDING, the trace id is
    authoritative (its `feedback.created` event is due), and a sibling report of the same owner on the
    turn that is already CAPTURED lends its copy (else the worker looks now). A CLIENT snapshot is never
    trusted with spans: PENDING, but nothing is copied or captured until the chat service verified it
    (`verify_due`). No snapshot or no trace id: nothing to capture."""
    if source == SOURCE_CLIENT:
        return CapturePlan(TRACE_PENDING, False, False, True, False)
    if source == SOURCE_CHAT and trace_id:
        return CapturePlan(TRACE_PENDING, True, True, False, True)
    return CapturePlan(TRACE_NONE, False, False, False, False)


def check_transition(current: int, new: int) -> None:
    """Raises FailedPrecondition when the status machine forbids current → new (same → allowed)."""
    if new == current:
        return
    if new not in _TRANSITIONS.get(current, frozenset()):
        raise FailedPrecondition(
            f"status cannot move from {STATUS_NAMES.get(current, current)} to {STATUS_NAMES.get(new, new)}",
            reason="INVALID_STATUS_TRANSITION",
        )


def check_update_mask(paths: Iterable[str]) -> frozenset[str]:
    """UpdateFeedback mask: only `status` / `issue_url`; `body` (immutable) or others → InvalidArgument."""
    ps = frozenset(paths)
    if not ps:
        raise InvalidArgument("update_mask", "must name at least one of: status, issue_url")
    for p in sorted(ps):
        if p == "body":
            raise InvalidArgument("update_mask", "`body` is immutable: the owner's words are never changed",
                                  reason="IMMUTABLE_FIELD")
        if p not in UPDATABLE_PATHS:
            raise InvalidArgument("update_mask", f"`{echo(p)}` cannot be updated (mutable: status, issue_url)")
    return ps


def check_triage_fields_unset(status: int, issue_url: str) -> None:
    """CreateFeedback: `feedback.status` and `feedback.issue_url` are triage's (UpdateFeedback, or
    FileFeedback which files the ticket and stores its URL; scope `feedback:triage`, each change in the
    audit trail), never the reporter's: a new report is OPEN without an issue. `status` may be unset or
    STATUS_OPEN (what every new report is); any other status, or any non-empty `issue_url` →
    InvalidArgument naming the field (reason TRIAGE_FIELD_ON_CREATE), the value never echoed."""
    v = Violations()
    if status not in (0, STATUS_OPEN):
        v.errors.append(_triage_field("feedback.status"))
    if issue_url:
        v.errors.append(_triage_field("feedback.issue_url"))
    v.raise_any()


def _triage_field(field_path: str) -> InvalidArgument:
    return InvalidArgument(field_path, "is set by triage, not by CreateFeedback: leave it empty and use "
                           "UpdateFeedback (or FileFeedback, which files the ticket and stores its URL)",
                           reason="TRIAGE_FIELD_ON_CREATE")


ISSUE_URL_MAX_CHARS = 2048


def check_issue_url(url: str) -> str:
    """A tracker link set by a person: '' (clear it) or an absolute `http://` / `https://` URL (RFC 3986)
    with a host, at most 2048 characters (the common practical URL limit), checked by
    `urls.split_http_url` (no whitespace, control or bidi/zero-width characters, a valid port), and
    without user info: `https://github.com@evil.example/` reads as GitHub to every triager who sees it,
    and a password in a link is shown to all of them. INVALID_ARGUMENT naming `feedback.issue_url`
    otherwise (`https://`, `file:///…`, `https://exa mple.com/`). (The markdown sink's own `file://`
    links are stored by FileFeedback.)"""
    check_text(url, "feedback.issue_url", ISSUE_URL_MAX_CHARS)
    if not url:
        return url
    parts = split_http_url(url, "feedback.issue_url", ISSUE_URL_MAX_CHARS)
    if "@" in parts.netloc:
        raise InvalidArgument("feedback.issue_url", "must not carry user info (user:password@)")
    return url


def spans_expired(turn_time: dt.datetime | None, now: dt.datetime, retention_days: int) -> bool:
    """True when the turn is older than the collector's span retention window."""
    return turn_time is not None and turn_time < now - dt.timedelta(days=retention_days)


# ---------------------------------------------------------------- ratings
def check_rating(key: RatingKey, note: str, note_max_bytes: int) -> None:
    """Shape checks of a rating (docs/architecture.md "The life of a rating"); InvalidArgument naming the field.

    aspect: slug `[a-z][a-z0-9_]{0,63}`; scope set; turn_index ≥ 0; artifact_id only (and required)
    for ARTIFACT scope; note: no NUL, ≤ `note_max_bytes` UTF-8 bytes.
    """
    if key.scope == 0:
        raise InvalidArgument("rating.scope", "is required (MESSAGE, OBJECTIVE, PLAN, ARTIFACT, PREFERENCES, CONVERSATION)")
    if not ASPECT_SLUG.match(key.aspect):
        raise InvalidArgument("rating.aspect", "must be a slug [a-z][a-z0-9_]{0,63} (e.g. reaction, task_completion)")
    if key.turn_index < 0:
        raise InvalidArgument("rating.turn_index", "must not be negative")
    if key.scope == SCOPE_ARTIFACT and not key.artifact_id:
        raise InvalidArgument("rating.artifact_id", "is required for ARTIFACT scope")
    if key.scope != SCOPE_ARTIFACT and key.artifact_id:
        raise InvalidArgument("rating.artifact_id", "is only allowed for ARTIFACT scope")
    check_text(key.artifact_id, "rating.artifact_id", 256)
    check_text(note, "rating.note")
    n = len(note.encode("utf-8"))
    if n > note_max_bytes:
        raise InvalidArgument("rating.note", f"is {n} UTF-8 bytes; the limit is {note_max_bytes}",
                              reason="TOO_LONG", limit=str(note_max_bytes))


def rating_mask(paths: Iterable[str]) -> frozenset[str]:
    """PutRating mask: a subset of sentiment/category/note/reasons/choice; empty = the first three."""
    ps = frozenset(paths)
    if not ps:
        return RATING_MASK_PATHS
    bad = sorted(ps - RATING_OWNABLE_PATHS)
    if bad:
        raise InvalidArgument("update_mask", f"`{echo(bad[0])}` is not a rating field this call can own "
                              "(sentiment, category, note, reasons, choice)")
    return ps


def fill_trend(rows: Iterable[DailyCount], end_day: dt.date, days: int) -> list[DailyCount]:
    """One entry per UTC day of the window (oldest first), rows of the same day summed, zeros for days
    without data."""
    by_day: dict[dt.date, list[int]] = {}
    for r in rows:
        d = by_day.setdefault(r.day, [0, 0, 0, 0])
        d[0] += r.positive
        d[1] += r.neutral
        d[2] += r.negative
        d[3] += r.reports
    out = []
    for i in range(days - 1, -1, -1):
        day = end_day - dt.timedelta(days=i)
        out.append(DailyCount(day, *by_day.get(day, (0, 0, 0, 0))))
    return out


def check_window_days(v: int) -> int:
    """1..365, 0 → 30 (GetFeedbackStatsRequest.window_days)."""
    if v == 0:
        return 30
    if not 1 <= v <= 365:
        raise InvalidArgument("window_days", "must be between 1 and 365")
    return v




# --- evaluations from other systems (issue 24, AcceptEvaluations; the proto's Evaluation comments) ---
# Labels that say which way a judgement goes, for statistics (any other label with no score: no sentiment).
_POSITIVE_LABELS = frozenset({"positive", "good", "pass", "passed", "correct", "true", "yes", "relevant", "faithful",
                              "factual", "helpful", "safe", "complete"})
_NEGATIVE_LABELS = frozenset({"negative", "bad", "fail", "failed", "incorrect", "false", "no", "irrelevant",
                              "unfaithful", "hallucinated", "unhelpful", "unsafe", "toxic", "incomplete"})
_NEUTRAL_LABELS = frozenset({"neutral", "partial", "partly", "mixed"})


def evaluation_sentiment(label: str, score: float | None) -> RatingSentiment:
    """How an evaluation counts in statistics: a label that says it (`pass`, `incorrect`, …), else the
    score's sign (> 0 positive, 0 neutral, < 0 negative; evaluators' scales differ, the sign is what they
    share), else UNSPECIFIED."""
    word = label.strip().lower()
    if word in _POSITIVE_LABELS:
        return RATING_POSITIVE
    if word in _NEGATIVE_LABELS:
        return RATING_NEGATIVE
    if word in _NEUTRAL_LABELS:
        return RATING_NEUTRAL
    if score is None:
        return RatingSentiment.UNSPECIFIED
    return RATING_POSITIVE if score > 0 else RATING_NEGATIVE if score < 0 else RATING_NEUTRAL
