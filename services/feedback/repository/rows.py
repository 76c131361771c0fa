"""Stored rows → model, and the JSON the `jsonb` columns hold (snapshot, trace_snapshot).

The JSON keys are the proto field names of `Snapshot` / `TraceSnapshot` (times RFC 3339 in UTC), so
rows written by earlier versions read back unchanged; unknown keys are ignored.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from services.feedback.model.enums import (
    Author,
    Category,
    RatingOrigin,
    RatingScope,
    RatingSentiment,
    Sentiment,
    SnapshotSource,
    Status,
    Surface,
    TraceState,
    member,
)
from services.feedback.model.rating import Rating, RatingKey
from services.feedback.model.report import (
    Anchor,
    Context,
    FrozenComponent,
    FrozenEvent,
    FrozenSpan,
    FrozenTrace,
    Report,
    Snapshot,
    ToolCall,
    TraceSnapshot,
)

_CONTEXT_KEYS = ("agent", "model", "audio_key", "dictation", "client_version", "channel")
_TOOL_KEYS = ("name", "call_id", "status", "duration_ms", "arguments", "result", "result_size_bytes", "span_id")
_SPAN_KEYS = ("span_id", "parent_span_id", "name", "service_name", "status", "duration_ms", "start_offset_ms")


def _time_json(t: dt.datetime | None) -> str | None:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if t is not None else None


def _time(s: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(s) if s else None


def snapshot_json(s: Snapshot) -> dict[str, Any]:
    c = s.context
    out: dict[str, Any] = {
        "source": int(s.source), "target_role": s.target_role, "target_text": s.target_text,
        "target_text_clipped": s.target_text_clipped, "preceding_user_text": s.preceding_user_text,
        "preceding_user_text_clipped": s.preceding_user_text_clipped, "trace_id": s.trace_id,
        "turn_index": s.turn_index, "context": {k: getattr(c, k) for k in _CONTEXT_KEYS},
    }
    if s.target_time is not None:
        out["target_time"] = _time_json(s.target_time)
    if s.unverified:
        out["unverified"] = True
    if s.component is not None:
        out["component"] = component_json(s.component)
    return out


def component_json(f: FrozenComponent) -> dict[str, Any]:
    return {"scope": int(f.scope), "artifact_id": f.artifact_id, "turn_index": f.turn_index, "text": f.text,
            "text_clipped": f.text_clipped, "title": f.title, "media_type": f.media_type, "version": f.version,
            "changed": f.changed, "frozen": f.frozen}


def component_from_json(d: Mapping[str, Any]) -> FrozenComponent:
    return FrozenComponent(RatingScope(d["scope"]), d.get("artifact_id", ""), int(d.get("turn_index", -1)),
                           d.get("text", ""), bool(d.get("text_clipped")), d.get("title", ""), d.get("media_type", ""),
                           int(d.get("version", 0)), bool(d.get("changed")), bool(d.get("frozen")))


def snapshot_from_json(d: Mapping[str, Any], source: int) -> Snapshot:
    """`source`: the row's `snapshot_source` column (the JSON's own copy is not authoritative)."""
    if not d:
        return Snapshot(source=SnapshotSource(source))
    ctx = d.get("context") or {}
    return Snapshot(
        source=SnapshotSource(source), target_role=d.get("target_role", ""), target_text=d.get("target_text", ""),
        target_text_clipped=bool(d.get("target_text_clipped")), target_time=_time(d.get("target_time")),
        preceding_user_text=d.get("preceding_user_text", ""),
        preceding_user_text_clipped=bool(d.get("preceding_user_text_clipped")), trace_id=d.get("trace_id", ""),
        turn_index=int(d.get("turn_index") or 0),
        context=Context(**{k: str(ctx[k]) for k in _CONTEXT_KEYS if k in ctx}) if ctx else Context(),
        unverified=bool(d.get("unverified")),
        component=component_from_json(d["component"]) if d.get("component") else None,
    )


def frozen_json(f: FrozenTrace) -> dict[str, Any]:
    return {
        "tool_calls": [{k: getattr(c, k) for k in _TOOL_KEYS} for c in f.tool_calls],
        "events": [{"name": e.name, "time": _time_json(e.time) or "", "span_id": e.span_id,
                    "attributes": dict(e.attributes)} for e in f.events],
        "spans": [{k: getattr(s, k) for k in _SPAN_KEYS} for s in f.spans],
        "root_status": f.root_status,
        "duration_ms": f.duration_ms,
        **({"missing": list(f.missing)} if f.missing else {}),
        **({"truncated_value_count": f.truncated_value_count} if f.truncated_value_count else {}),
    }


def frozen_from_json(d: Mapping[str, Any]) -> FrozenTrace:
    if not d:
        return FrozenTrace()
    return FrozenTrace(
        tool_calls=tuple(ToolCall(**{k: c[k] for k in _TOOL_KEYS if k in c}) for c in d.get("tool_calls") or ()),
        events=tuple(FrozenEvent(name=e.get("name", ""), time=_time(e.get("time")), span_id=e.get("span_id", ""),
                                 attributes=e.get("attributes") or {}) for e in d.get("events") or ()),
        spans=tuple(FrozenSpan(**{k: s[k] for k in _SPAN_KEYS if k in s}) for s in d.get("spans") or ()),
        root_status=d.get("root_status", ""),
        duration_ms=float(d.get("duration_ms") or 0.0),
        missing=tuple(str(m) for m in d.get("missing") or ()),
        truncated_value_count=int(d.get("truncated_value_count") or 0),
    )


def anchor(r: Mapping[str, Any]) -> Anchor:
    return Anchor(kind=r["target_kind"], message=r["message"], instance=r["instance"], trace_id=r["trace_id"],
                  coding_session=r["coding_session"], coding_seq=r["coding_seq"])


def report(r: Mapping[str, Any]) -> Report:
    """A `FEEDBACK_COLUMNS` row as the model's Report."""
    state = TraceState(r["trace_state"])
    return Report(
        id=r["id"], owner=r["owner"], anchor=anchor(r), surface=Surface(r["surface"]), author=Author(r["author"]),
        body=r["body"], sentiment=Sentiment(r["sentiment"]), category=Category(r["category"]),
        snapshot=snapshot_from_json(r["snapshot"], r["snapshot_source"]),
        trace=TraceSnapshot(
            state=state, frozen=frozen_from_json(r["trace_snapshot"]), attempts=r["capture_attempts"],
            capture_time=r["capture_time"],
            next_attempt_time=r["next_capture_at"] if state == TraceState.PENDING else None,
            spans_expired=state == TraceState.EXPIRED,
        ),
        status=Status(r["status"]), issue_url=r["issue_url"], version=r["version"], create_time=r["create_time"],
        update_time=r["update_time"], turn_time=r["turn_time"], context_trace_id=r["context_trace_id"],
        turn_removed_time=r["turn_removed_time"],
    )


def rating(r: Mapping[str, Any]) -> Rating:
    """A `RATING_COLUMNS` row as the model's Rating."""
    return Rating(
        id=r["id"],
        key=RatingKey(r["conversation"], r["turn_index"], member(RatingScope, r["scope"]), r["aspect"], r["artifact_id"]),
        owner=r["owner"], sentiment=member(RatingSentiment, r["sentiment"]), category=member(Category, r["category"]),
        note=r["note"], origin=member(RatingOrigin, r["origin"]), message=r["message"], version=r["version"],
        create_time=r["create_time"],
        update_time=r["update_time"], reasons=tuple(r["reasons"]), choice=r["choice"],
    )
