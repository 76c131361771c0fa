"""Pure rules of the feedback service: limits, snapshots, status transitions, etags, the frozen copy
of a turn's spans, the capture worker's schedule, rating checks, statistics and the ticket draft.

No gRPC, no SQL here: the servicer translates protos to these shapes and the repository stores them.
Snapshots and frozen traces are plain dicts whose keys are the proto field names of
`agentfeedback.feedback.v1.Snapshot` / `TraceSnapshot` (stored as JSON, parsed back into the proto).
Enum values are the proto enum numbers.
Sources of the numbers: design.md ("Feedback", "Ratings") and issue 3 (limits).
"""
from __future__ import annotations

import datetime as dt
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.ids import check_text, clip

# Limits (design.md "Feedback"; issue 3 "Limits").
BODY_MAX_CHARS = 4000
TARGET_TEXT_MAX_CHARS = 2000
PRECEDING_TEXT_MAX_CHARS = 1000
# Caps on the frozen copy so one pathological trace cannot bloat a row.
MAX_FROZEN_SPANS = 500
MAX_FROZEN_EVENTS = 200
PREVIEW_MAX_CHARS = 2000
# Capture backoff never waits longer than this between two looks at the collector.
MAX_BACKOFF_S = 60.0

# Proto enum numbers (agentfeedback.feedback.v1).
AUTHOR_USER, AUTHOR_AGENT = 1, 2
STATUS_OPEN, STATUS_TRIAGED, STATUS_FILED, STATUS_DISMISSED = 1, 2, 3, 4
SOURCE_CHAT, SOURCE_CLIENT, SOURCE_NONE = 1, 2, 3
TRACE_NONE, TRACE_PENDING, TRACE_CAPTURED, TRACE_UNAVAILABLE, TRACE_EXPIRED = 0, 1, 2, 3, 4
SCOPE_MESSAGE, SCOPE_ARTIFACT = 1, 4
ORIGIN_USER, ORIGIN_BRANCH_COPY = 1, 2
RATING_POSITIVE, RATING_NEUTRAL, RATING_NEGATIVE = 1, 2, 3
SENTIMENT_BAD = 2

CATEGORY_NAMES = {
    0: "unspecified", 1: "broken response", 2: "network", 3: "tool failure", 4: "rendering",
    5: "unsafe content", 6: "other",
}
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
RATING_MASK_PATHS = frozenset({"sentiment", "category", "note"})
ASPECT_SLUG = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


# ---------------------------------------------------------------- reports
def check_body(body: str) -> str:
    """The owner's words: required, no NUL, ≤ 4000 Unicode code points (never clipped).

    Raises InvalidArgument naming `feedback.body` (and the limit when over it).
    """
    return check_text(body, "feedback.body", BODY_MAX_CHARS, required=True)


def etag(version: int) -> str:
    """AIP-154 etag of a row version (a strong validator: quoted version number)."""
    return f'"{version}"'


def etag_matches(given: str, version: int) -> bool:
    """True when `given` is empty (no precondition) or names `version`."""
    return not given or given.strip() in (etag(version), str(version), f"W/{etag(version)}")


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


def _ts(t: dt.datetime | None) -> str | None:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if t is not None else None


def build_snapshot(target: MessageView, turn: Sequence[MessageView], client_version: str = "") -> dict[str, Any]:
    """The authoritative snapshot: the target (≤ 2000 chars), the user message that preceded it in
    its turn (≤ 1000; the target itself when it is the user's), trace id, turn index, context with
    voice provenance. Clipped texts say so.
    """
    user = target if target.role == "ROLE_USER" else next((m for m in turn if m.role == "ROLE_USER"), None)
    text, text_clipped = clip(target.content, TARGET_TEXT_MAX_CHARS)
    prev, prev_clipped = clip(user.content if user else "", PRECEDING_TEXT_MAX_CHARS)
    voice = user or target
    snap: dict[str, Any] = {
        "source": SOURCE_CHAT,
        "target_role": target.role,
        "target_text": text,
        "target_text_clipped": text_clipped,
        "preceding_user_text": prev,
        "preceding_user_text_clipped": prev_clipped,
        "trace_id": target.trace_id,
        "turn_index": target.turn_index,
        "context": {
            "agent": target.agent or voice.agent,
            "model": next((m.model for m in turn if m.model), target.model),
            "audio_key": target.audio_key or voice.audio_key,
            "dictation": target.dictation or voice.dictation,
            "client_version": client_version,
            "channel": voice.channel,
        },
    }
    if target.create_time is not None:
        snap["target_time"] = _ts(target.create_time)
    return snap


def client_snapshot(snap: dict[str, Any], field_path: str = "client_snapshot") -> dict[str, Any]:
    """A client-supplied snapshot (chat service unreachable): texts checked for NUL and clipped,
    marked SNAPSHOT_SOURCE_CLIENT. Raises InvalidArgument on a malformed trace id or NUL bytes.
    """
    out = dict(snap)
    out["source"] = SOURCE_CLIENT
    for key, limit in (("target_text", TARGET_TEXT_MAX_CHARS), ("preceding_user_text", PRECEDING_TEXT_MAX_CHARS)):
        text = check_text(str(out.get(key, "")), f"{field_path}.{key}")
        out[key], clipped = clip(text, limit)
        out[f"{key}_clipped"] = bool(out.get(f"{key}_clipped")) or clipped
    return out


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
            raise InvalidArgument("update_mask", f"`{p}` cannot be updated (mutable: status, issue_url)")
    return ps


ISSUE_URL_MAX_CHARS = 2048


def check_issue_url(url: str) -> str:
    """A tracker link set by a person: '' (clear it) or an absolute `http://` / `https://` URL (RFC 3986)
    with a host, no whitespace or control characters, at most 2048 characters (the common practical
    URL limit). INVALID_ARGUMENT naming `feedback.issue_url` otherwise (`https://`, `file:///…`,
    `https://exa mple.com/`). (The markdown sink's own `file://` links are stored by FileFeedback.)"""
    check_text(url, "feedback.issue_url", ISSUE_URL_MAX_CHARS)
    if not url:
        return url
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidArgument("feedback.issue_url", "must not contain whitespace or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise InvalidArgument("feedback.issue_url", "is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidArgument("feedback.issue_url", "must be an absolute http:// or https:// URL with a host")
    return url


def spans_expired(turn_time: dt.datetime | None, now: dt.datetime, retention_days: int) -> bool:
    """True when the turn is older than the collector's span retention window."""
    return turn_time is not None and turn_time < now - dt.timedelta(days=retention_days)


# ---------------------------------------------------------------- frozen spans
@dataclass(frozen=True)
class SpanEventView:
    name: str
    time_unix_nano: int
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanView:
    """One collected span (from TraceQueryService.Span). status: OK / ERROR / UNSET."""

    span_id: str
    parent_span_id: str
    name: str
    service_name: str
    status: str
    start_unix_nano: int
    end_unix_nano: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    events: Sequence[SpanEventView] = ()


# Our own `feedback.create` span lands in the turn's trace too; it is not evidence of the turn.
OWN_SPAN_NAMES = frozenset({"feedback.create"})
# Attribute keys of a tool call (OTel GenAI semantic conventions first, then the agent's own).
_ARGS_KEYS = ("gen_ai.tool.call.arguments", "tool.arguments", "tool.arguments.preview")
_RESULT_KEYS = ("gen_ai.tool.call.result", "tool.result", "tool.result.preview")
_RESULT_SIZE_KEYS = ("tool.result.size_bytes", "tool.result_size_bytes", "gen_ai.tool.call.result.size_bytes",
                     "tool.result.size")


def evidence_spans(spans: Iterable[SpanView]) -> list[SpanView]:
    return [s for s in spans if s.name not in OWN_SPAN_NAMES]


def _first(attrs: Mapping[str, Any], keys: Sequence[str], default: Any = "") -> Any:
    for k in keys:
        if k in attrs and attrs[k] not in (None, ""):
            return attrs[k]
    return default


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _root(spans: Sequence[SpanView]) -> SpanView | None:
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_span_id or s.parent_span_id not in ids]
    return min(roots, key=lambda s: s.start_unix_nano) if roots else None


def has_root(spans: Sequence[SpanView]) -> bool:
    """True when the turn's root span (no parent) has arrived: it ends last, after the reply."""
    return any(not s.parent_span_id for s in spans)


def freeze_trace(spans: Sequence[SpanView]) -> dict[str, Any]:
    """The frozen copy of a turn (TraceSnapshot fields): tool calls (name, call id, status, duration,
    argument/result previews, result size), every span event except chat.in/chat.out ordering marks
    kept too, span summaries with offsets from the root's start, the root's status and duration.
    """
    spans = sorted(evidence_spans(spans), key=lambda s: (s.start_unix_nano, s.span_id))
    root = _root(spans)
    t0 = root.start_unix_nano if root else (spans[0].start_unix_nano if spans else 0)
    tools = []
    events: list[dict[str, Any]] = []
    for s in spans:
        if s.name == "tool.call" or "gen_ai.tool.name" in s.attributes:
            size = _first(s.attributes, _RESULT_SIZE_KEYS, 0)
            tools.append({
                "name": str(s.attributes.get("gen_ai.tool.name", s.name)),
                "call_id": str(s.attributes.get("gen_ai.tool.call.id", "")),
                "status": s.status,
                "duration_ms": _ms(s.end_unix_nano - s.start_unix_nano),
                "arguments": clip(str(_first(s.attributes, _ARGS_KEYS)), PREVIEW_MAX_CHARS)[0],
                "result": clip(str(_first(s.attributes, _RESULT_KEYS)), PREVIEW_MAX_CHARS)[0],
                "result_size_bytes": _int(size),
                "span_id": s.span_id,
            })
        for e in s.events:
            if len(events) < MAX_FROZEN_EVENTS:
                events.append({"name": e.name, "time": _ns_to_rfc3339(e.time_unix_nano), "span_id": s.span_id,
                               "attributes": {k: _jsonable(v) for k, v in e.attributes.items()}})
    out: dict[str, Any] = {
        "tool_calls": tools,
        "events": events,
        "spans": [
            {"span_id": s.span_id, "parent_span_id": s.parent_span_id, "name": s.name,
             "service_name": s.service_name, "status": s.status,
             "duration_ms": _ms(s.end_unix_nano - s.start_unix_nano),
             "start_offset_ms": _ms(s.start_unix_nano - t0)}
            for s in spans[:MAX_FROZEN_SPANS]
        ],
        "root_status": root.status if root else "",
        "duration_ms": _ms(root.end_unix_nano - root.start_unix_nano) if root else 0.0,
    }
    return out


def _int(v: Any) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return 0


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, bool, int, float)) or v is None:
        return v
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


def _ns_to_rfc3339(ns: int) -> str:
    t = dt.datetime.fromtimestamp(ns // 1_000_000_000, dt.UTC).replace(microsecond=(ns % 1_000_000_000) // 1000)
    return _ts(t) or ""


@dataclass(frozen=True)
class CaptureDecision:
    """What the worker does with one PENDING row after one look at the collector.

    state: the new TraceSnapshotState (PENDING = look again at `retry_in_s`).
    """

    state: int
    retry_in_s: float = 0.0
    frozen: dict[str, Any] | None = None
    span_count: int = -1


def backoff_s(attempts: int, base_s: float) -> float:
    """Exponential backoff: base · 2^(attempts-1), at most 60 s (design: spans arrive seconds late)."""
    return min(MAX_BACKOFF_S, base_s * (2 ** max(0, attempts - 1)))


def decide_capture(
    spans: Sequence[SpanView] | None,
    *,
    previous_count: int,
    attempts: int,
    max_attempts: int,
    base_backoff_s: float,
    expired: bool,
) -> CaptureDecision:
    """One step of the capture state machine.

    spans None = the collector has no span of the trace (NOT_FOUND). A trace is frozen once its root
    span is there and the span count did not change since the previous look (the agent's and the
    gateway's exporters flush independently), or when attempts ran out with a root present.
    No spans and the turn older than the retention window → EXPIRED; attempts exhausted → UNAVAILABLE.
    """
    ev = evidence_spans(spans or [])
    out_of_tries = attempts >= max_attempts
    if not ev:
        if expired:
            return CaptureDecision(TRACE_EXPIRED)
        if out_of_tries:
            return CaptureDecision(TRACE_UNAVAILABLE)
        return CaptureDecision(TRACE_PENDING, backoff_s(attempts, base_backoff_s), span_count=0)
    if (has_root(ev) and len(ev) == previous_count) or out_of_tries or expired:
        return CaptureDecision(TRACE_CAPTURED, frozen=freeze_trace(ev), span_count=len(ev))
    # Root there but maybe not every exporter flushed: look again soon (not a failure).
    wait = base_backoff_s if has_root(ev) else backoff_s(attempts, base_backoff_s)
    return CaptureDecision(TRACE_PENDING, wait, span_count=len(ev))


# ---------------------------------------------------------------- ratings
@dataclass(frozen=True)
class RatingKey:
    conversation: str
    turn_index: int
    scope: int
    aspect: str
    artifact_id: str


def check_rating(key: RatingKey, note: str, note_max_bytes: int) -> None:
    """Shape checks of a rating (design.md "Ratings"); InvalidArgument naming the field.

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
    """PutRating mask: a subset of sentiment/category/note; empty = all three."""
    ps = frozenset(paths)
    if not ps:
        return RATING_MASK_PATHS
    bad = sorted(ps - RATING_MASK_PATHS)
    if bad:
        raise InvalidArgument("update_mask", f"`{bad[0]}` is not a rating field this call can own "
                              "(sentiment, category, note)")
    return ps


def fill_trend(rows: Iterable[Mapping[str, Any]], end_day: dt.date, days: int) -> list[dict[str, Any]]:
    """One entry per UTC day of the window (oldest first), zeros for days without data.

    rows: mappings with `day` (date) and any of positive/neutral/negative/reports counts.
    """
    by_day: dict[dt.date, dict[str, int]] = {}
    for r in rows:
        d = by_day.setdefault(r["day"], {"positive": 0, "neutral": 0, "negative": 0, "reports": 0})
        for k in d:
            d[k] += int(r.get(k, 0) or 0)
    out = []
    for i in range(days - 1, -1, -1):
        day = end_day - dt.timedelta(days=i)
        counts = by_day.get(day, {"positive": 0, "neutral": 0, "negative": 0, "reports": 0})
        out.append({"day": day.isoformat(), **counts})
    return out


def check_window_days(v: int) -> int:
    """1..365, 0 → 30 (GetFeedbackStatsRequest.window_days)."""
    if v == 0:
        return 30
    if not 1 <= v <= 365:
        raise InvalidArgument("window_days", "must be between 1 and 365")
    return v


# ---------------------------------------------------------------- tickets
@dataclass(frozen=True)
class TicketFields:
    """What a ticket carries beyond category, ids and the tool-call summary (issue 7 "Filing").

    Default: neither the owner's words nor the message texts reach an external tracker.
    """

    body: bool = False
    message_text: bool = False


def _quote(text: str) -> str:
    return "\n".join("> " + line for line in (text or "").splitlines() or [""])


def render_ticket(fb: Mapping[str, Any], fields: TicketFields = TicketFields()) -> tuple[str, str]:
    """The Markdown ticket draft of one report: (title, body).

    fb: the report as proto-JSON field names (name, owner, message/trace_id, instance, category,
    sentiment, author, body, snapshot, trace_snapshot, create_time). Always: category, ids, tool-call
    summary, events; the owner's words and the message texts only when `fields` enables them.
    """
    snap = fb.get("snapshot") or {}
    ts = fb.get("trace_snapshot") or {}
    ctx = snap.get("context") or {}
    category = CATEGORY_NAMES.get(int(fb.get("category") or 0), "unspecified")
    trace_id = fb.get("trace_id") or snap.get("trace_id", "")
    coding = fb.get("coding") or {}
    instance, message = fb.get("instance") or "", fb.get("message") or ""
    # The anchor that exists: a coding session + timeline seq, else the turn of an instance, else a
    # message or trace id alone. Empty fields are left out (never "turn ?" or "instance: ``").
    if coding.get("session"):
        anchor = f"timeline seq {int(coding.get('timeline_seq') or 0)} of coding session {coding['session']}"
    elif instance and (snap.get("target_role") or "turn_index" in snap):  # proto JSON omits a turn index of 0
        turn = int(snap.get("turn_index") or 0)
        anchor = f"turn {turn} of {instance}"
    else:
        anchor = message or (f"trace {trace_id}" if trace_id else "") or instance or "unanchored report"
    title = f"[feedback] {category}: {anchor}"
    lines = [f"## Feedback {fb.get('name', '')}", ""]
    # A client-supplied snapshot is the reporter's claim until the chat service confirms it (issue 3):
    # say so on every rendering, never present it as evidence.
    if snap.get("unverified"):
        title = f"[unverified] {title}"
        lines += ["> **Unverified:** the chat service did not confirm this anchor for the reporter; the quoted",
                  "> text and ids below are the reporter's claim, not evidence.", ""]
    elif int(snap.get("source") or 0) == SOURCE_CLIENT:
        lines += ["> **Client-supplied snapshot:** the chat service was unreachable when this was reported;",
                  "> the quote below is not yet confirmed by it.", ""]
    sentiment = ("bad" if int(fb.get("sentiment") or 0) == SENTIMENT_BAD else "good" if fb.get("sentiment")
                 else "unspecified")
    items = [
        ("category", category),
        ("sentiment", sentiment),
        ("author", "agent" if int(fb.get("author") or 0) == AUTHOR_AGENT else "user"),
        ("coding session", f"`{coding['session']}`" if coding.get("session") else ""),
        ("timeline seq", str(int(coding.get("timeline_seq") or 0)) if coding.get("session") else ""),
        ("instance", f"`{instance}`" if instance else ""),
        ("message", f"`{message}`" if message else ""),
        ("trace id", f"`{trace_id}`" if trace_id else ""),
        ("turn index", str(int(snap.get("turn_index") or 0)) if anchor.startswith("turn ") else ""),
        ("created", str(fb.get("create_time") or "")),
        ("agent / model", " / ".join(x for x in (ctx.get("agent", ""), ctx.get("model", "")) if x)),
    ]
    lines += [f"- {k}: {v}" for k, v in items if v]
    if ctx.get("audio_key"):
        lines.append(f"- voice: audio key `{ctx['audio_key']}`")
    if fields.body:
        heading = ("The owner's words, as the agent recorded them" if int(fb.get("author") or 0) == AUTHOR_AGENT
                   else "The owner's words")
        lines += ["", f"### {heading}", "", _quote(str(fb.get("body", "")))]
    if fields.message_text:
        lines += ["", "### The turn before", "", _quote(snap.get("preceding_user_text", "")),
                  "", f"### The flagged message ({snap.get('target_role', '')})", "", _quote(snap.get("target_text", ""))]
        if ctx.get("dictation"):
            lines += ["", "Dictation as heard:", "", _quote(ctx["dictation"])]
    state = ts.get("state", 0)
    state_name = {1: "pending", 2: "captured", 3: "unavailable", 4: "expired"}.get(int(state or 0), "none")
    lines += ["", f"### Tool calls (trace snapshot {state_name}, root status {ts.get('root_status', '') or '-'}, "
              f"{float(ts.get('duration_ms') or 0):.1f} ms)", ""]
    calls = ts.get("tool_calls") or []
    if calls:
        lines += ["| tool | call id | status | ms | result bytes |", "|---|---|---|---|---|"]
        for c in calls:
            lines.append(f"| {c.get('name', '')} | {c.get('call_id', '')} | {c.get('status', '')} | "
                         f"{float(c.get('duration_ms') or 0):.1f} | {c.get('result_size_bytes', 0)} |")
    else:
        lines.append("(none recorded)")
    events = [e for e in ts.get("events") or [] if e.get("name") not in ("chat.in", "chat.out")]
    if events:
        lines += ["", "### Events", ""]
        lines += [f"- `{e.get('name')}` at {e.get('time', '')} (span {e.get('span_id', '')})" for e in events]
    return title, "\n".join(lines) + "\n"
