"""The frozen copy of a turn's spans and the capture worker's state machine (pure rules, no I/O).

A report keeps the evidence of its turn (tool calls, span events, span summaries) even after the
collector's retention removed the spans; `freeze_trace` makes that copy, `decide_capture` says what
one look at the collector means for a PENDING row (docs/architecture.md "The life of a report").
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common import toolcalls
from services.common.clip import truncate
from services.feedback.model.enums import TraceState
from services.feedback.model.report import FrozenEvent, FrozenSpan, FrozenTrace, ToolCall

# Caps on the frozen copy so one pathological trace cannot bloat a row.
MAX_FROZEN_SPANS = 500
MAX_FROZEN_EVENTS = 200
PREVIEW_MAX_CHARS = 2000
# Capture backoff never waits longer than this between two looks at the collector.
MAX_BACKOFF_S = 60.0


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


@dataclass(frozen=True)
class CollectedTrace:
    """One answer of TraceQueryService.GetTrace: the trace's spans, and how many of their attribute
    values the collector cut to fit its answer budget (`Trace.truncated_value_count`; 0: as stored)."""

    spans: Sequence[SpanView]
    truncated_value_count: int = 0


# Our own `feedback.create` span lands in the turn's trace too; it is not evidence of the turn.
OWN_SPAN_NAMES = frozenset({"feedback.create"})


def evidence_spans(spans: Iterable[SpanView]) -> list[SpanView]:
    return [s for s in spans if s.name not in OWN_SPAN_NAMES]


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _root(spans: Sequence[SpanView]) -> SpanView | None:
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_span_id or s.parent_span_id not in ids]
    return min(roots, key=lambda s: s.start_unix_nano) if roots else None


def has_root(spans: Sequence[SpanView]) -> bool:
    """True when the turn's root span (no parent) has arrived: it ends last, after the reply."""
    return any(not s.parent_span_id for s in spans)


def freeze_trace(spans: Sequence[SpanView], truncated_value_count: int = 0) -> FrozenTrace:
    """The frozen copy of a turn: tool calls (name, call id, status, duration, argument/result
    previews ≤ 2000 chars, result size), span events (≤ 200), span summaries (≤ 500) with offsets
    from the root's start, the root's status and duration. Our own `feedback.create` span is left out.
    `truncated_value_count`: attribute values the collector cut in the answer `spans` came from (kept
    on the copy, so a reader knows its previews may be shorter than what the agent recorded).
    """
    spans = sorted(evidence_spans(spans), key=lambda s: (s.start_unix_nano, s.span_id))
    root = _root(spans)
    t0 = root.start_unix_nano if root else (spans[0].start_unix_nano if spans else 0)
    tools = []
    events: list[FrozenEvent] = []
    for s in spans:
        if toolcalls.is_tool_call(s.name, s.attributes):
            tools.append(ToolCall(
                name=toolcalls.tool_name(s.name, s.attributes),
                call_id=toolcalls.call_id(s.attributes),
                status=s.status,
                duration_ms=_ms(s.end_unix_nano - s.start_unix_nano),
                arguments=truncate(str(toolcalls.first(s.attributes, toolcalls.ARGUMENT_KEYS)), PREVIEW_MAX_CHARS)[0],
                result=truncate(str(toolcalls.first(s.attributes, toolcalls.RESULT_KEYS)), PREVIEW_MAX_CHARS)[0],
                result_size_bytes=_int(toolcalls.first(s.attributes, toolcalls.RESULT_SIZE_KEYS, 0)),
                span_id=s.span_id,
            ))
        for e in s.events:
            if len(events) < MAX_FROZEN_EVENTS:
                events.append(FrozenEvent(name=e.name, time=_ns_to_datetime(e.time_unix_nano), span_id=s.span_id,
                                          attributes={k: _jsonable(v) for k, v in e.attributes.items()}))
    return FrozenTrace(
        tool_calls=tuple(tools),
        events=tuple(events),
        spans=tuple(
            FrozenSpan(span_id=s.span_id, parent_span_id=s.parent_span_id, name=s.name, service_name=s.service_name,
                       status=s.status, duration_ms=_ms(s.end_unix_nano - s.start_unix_nano),
                       start_offset_ms=_ms(s.start_unix_nano - t0))
            for s in spans[:MAX_FROZEN_SPANS]
        ),
        root_status=root.status if root else "",
        duration_ms=_ms(root.end_unix_nano - root.start_unix_nano) if root else 0.0,
        missing=missing_parts(spans),
        truncated_value_count=truncated_value_count,
    )


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


def _ns_to_datetime(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns // 1_000_000_000, dt.UTC).replace(microsecond=(ns % 1_000_000_000) // 1000)


@dataclass(frozen=True)
class CaptureDecision:
    """What the worker does with one row after one look at the collector.

    state: the new state (PENDING = look again in `retry_in_s` seconds). frozen None with state
    CAPTURED: nothing new to write. recheck_in_s (CAPTURED incomplete): look again then, None: never.
    """

    state: TraceState
    retry_in_s: float = 0.0
    frozen: FrozenTrace | None = None
    span_count: int = -1
    recheck_in_s: float | None = None


def backoff_s(attempts: int, base_s: float) -> float:
    """Exponential backoff: base · 2^(attempts-1), at most 60 s (spans arrive seconds late)."""
    return min(MAX_BACKOFF_S, base_s * (2 ** max(0, attempts - 1)))


# A chat turn's parts: the gateway's root span with its two events, and the agent's span.
_TURN_PARTS = ("chat.turn", "chat.in", "chat.out")


def missing_parts(spans: Sequence[SpanView]) -> tuple[str, ...]:
    """What a frozen copy of a turn lacks: the root span (for a chat turn `chat.turn` with its events
    `chat.in` / `chat.out`, whose gateway exports them last) and, under a `chat.turn`, `agent.think`."""
    names = {s.name for s in spans}
    out: list[str] = []
    if not has_root(spans):
        out += _TURN_PARTS if ("agent.think" in names or not names) else ("root span",)
    elif "chat.turn" in names and "agent.think" not in names:
        out.append("agent.think")
    return tuple(out)


def decide_capture(
    spans: Sequence[SpanView] | None,
    *,
    previous_count: int,
    attempts: int,
    max_attempts: int,
    base_backoff_s: float,
    expired: bool,
    settle_in_s: float | None = None,
    recheck: bool = False,
    recheck_window_over: bool = False,
    recheck_every_s: float = MAX_BACKOFF_S,
    truncated_value_count: int = 0,
) -> CaptureDecision:
    """One step of the capture state machine.

    spans None = the collector has no span of the trace (NOT_FOUND). A trace is frozen once its root
    span is there and the span count did not change since the previous look (the agent's and the
    gateway's exporters flush independently), or when attempts ran out with a root present, or when
    the settle wait is over (`settle_in_s` ≤ 0: the turn is `capture_settle_s` old; spans that have
    not arrived by then died with their process) — then with `missing` naming what never came, and
    looked at again (`recheck_in_s`, at most every `recheck_every_s`) until `recheck_window_over`.
    No spans and the turn older than the retention window → EXPIRED; attempts exhausted → UNAVAILABLE.
    `recheck`: the row is such an incomplete copy; more spans than `previous_count` → frozen again.
    `truncated_value_count`: values the collector cut in this answer, recorded on a copy frozen from it.
    """
    ev = evidence_spans(spans or [])
    again = None if expired or recheck_window_over else min(recheck_every_s, backoff_s(attempts, base_backoff_s))
    if recheck:
        if len(ev) <= previous_count:
            return CaptureDecision(TraceState.CAPTURED, span_count=previous_count, recheck_in_s=again)
        frozen = freeze_trace(ev, truncated_value_count)
        return CaptureDecision(TraceState.CAPTURED, frozen=frozen, span_count=len(ev),
                               recheck_in_s=again if frozen.missing else None)
    out_of_tries = attempts >= max_attempts
    settled = settle_in_s is not None and settle_in_s <= 0
    if not ev:
        if expired:
            return CaptureDecision(TraceState.EXPIRED)
        if out_of_tries:
            return CaptureDecision(TraceState.UNAVAILABLE)
        return CaptureDecision(TraceState.PENDING, _until_settled(backoff_s(attempts, base_backoff_s), settle_in_s),
                               span_count=0)
    if (has_root(ev) and len(ev) == previous_count) or out_of_tries or expired or settled:
        frozen = freeze_trace(ev, truncated_value_count)
        return CaptureDecision(TraceState.CAPTURED, frozen=frozen, span_count=len(ev),
                               recheck_in_s=again if frozen.missing else None)
    # Root there but maybe not every exporter flushed: look again soon (not a failure).
    wait = base_backoff_s if has_root(ev) else backoff_s(attempts, base_backoff_s)
    return CaptureDecision(TraceState.PENDING, _until_settled(wait, settle_in_s), span_count=len(ev))


def _until_settled(wait_s: float, settle_in_s: float | None) -> float:
    """Never wait past the settle deadline (so the copy is frozen close to it)."""
    return wait_s if settle_in_s is None or settle_in_s <= 0 else min(wait_s, max(0.05, settle_in_s))
