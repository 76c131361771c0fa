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

from services.common.ids import clip
from services.feedback.model import FrozenEvent, FrozenSpan, FrozenTrace, ToolCall, TraceState

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


def freeze_trace(spans: Sequence[SpanView]) -> FrozenTrace:
    """The frozen copy of a turn: tool calls (name, call id, status, duration, argument/result
    previews ≤ 2000 chars, result size), span events (≤ 200), span summaries (≤ 500) with offsets
    from the root's start, the root's status and duration. Our own `feedback.create` span is left out.
    """
    spans = sorted(evidence_spans(spans), key=lambda s: (s.start_unix_nano, s.span_id))
    root = _root(spans)
    t0 = root.start_unix_nano if root else (spans[0].start_unix_nano if spans else 0)
    tools = []
    events: list[FrozenEvent] = []
    for s in spans:
        if s.name == "tool.call" or "gen_ai.tool.name" in s.attributes:
            tools.append(ToolCall(
                name=str(s.attributes.get("gen_ai.tool.name", s.name)),
                call_id=str(s.attributes.get("gen_ai.tool.call.id", "")),
                status=s.status,
                duration_ms=_ms(s.end_unix_nano - s.start_unix_nano),
                arguments=clip(str(_first(s.attributes, _ARGS_KEYS)), PREVIEW_MAX_CHARS)[0],
                result=clip(str(_first(s.attributes, _RESULT_KEYS)), PREVIEW_MAX_CHARS)[0],
                result_size_bytes=_int(_first(s.attributes, _RESULT_SIZE_KEYS, 0)),
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
    """What the worker does with one PENDING row after one look at the collector.

    state: the new state (PENDING = look again in `retry_in_s` seconds).
    """

    state: TraceState
    retry_in_s: float = 0.0
    frozen: FrozenTrace | None = None
    span_count: int = -1


def backoff_s(attempts: int, base_s: float) -> float:
    """Exponential backoff: base · 2^(attempts-1), at most 60 s (spans arrive seconds late)."""
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
            return CaptureDecision(TraceState.EXPIRED)
        if out_of_tries:
            return CaptureDecision(TraceState.UNAVAILABLE)
        return CaptureDecision(TraceState.PENDING, backoff_s(attempts, base_backoff_s), span_count=0)
    if (has_root(ev) and len(ev) == previous_count) or out_of_tries or expired:
        return CaptureDecision(TraceState.CAPTURED, frozen=freeze_trace(ev), span_count=len(ev))
    # Root there but maybe not every exporter flushed: look again soon (not a failure).
    wait = base_backoff_s if has_root(ev) else backoff_s(attempts, base_backoff_s)
    return CaptureDecision(TraceState.PENDING, wait, span_count=len(ev))
