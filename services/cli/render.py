"""Plain-text renderings for the terminal: a trace waterfall and a feedback row's evidence."""
from __future__ import annotations

from google.protobuf.json_format import MessageToDict

from agentfeedback.feedback.v1 import feedback_pb2
from agentfeedback.traces.v1 import traces_pb2
from services.cli.terminal import for_terminal
from services.common import toolcalls
from services.common.trace_cut import cut_notice, frozen_cut_notice

_WIDTH = 40


def _attrs(struct) -> dict:
    """A Struct as a dict; whole numbers shown as integers (Struct stores every number as a double)."""
    d = MessageToDict(struct) if struct is not None else {}
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in d.items()}


def turn_axis(spans: list[traces_pb2.Span]) -> tuple[int, int]:
    """The turn's time axis (t0, t1) in ns: from the first span's start to the last end among the spans
    that started while the first root span (the turn, `chat.turn`) ran. Spans that start later (the
    feedback service's `feedback.create`, minutes after the turn) stay off the axis: on it they would
    squash the turn into one column. Same rule as the console's `turnAxis`."""
    ids = {s.span_id for s in spans}
    by_start = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
    root = next((s for s in by_start if s.parent_span_id not in ids), by_start[0])
    during = [s.end_time_unix_nano for s in by_start if s.start_time_unix_nano <= root.end_time_unix_nano]
    return by_start[0].start_time_unix_nano, max([root.end_time_unix_nano, *during])


def _after(ns: int) -> str:
    ms = ns / 1e6
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.1f} s" if ms < 120_000 else f"{ms / 60_000:.0f} min"


def dropped_counts(s: traces_pb2.Span) -> str:
    """What the span lost before it was stored, e.g. "dropped: 2 attributes, 61 resource attributes"
    (OTLP dropped_*_count: the sender's limits plus the collector's; 1 event, 3 links…); "" when nothing."""
    parts = [f"{n} {noun if n != 1 else noun[:-1]}" for n, noun in (
        (s.dropped_attributes_count, "attributes"), (s.dropped_events_count, "events"),
        (s.dropped_links_count, "links"), (s.resource_dropped_attributes_count, "resource attributes")) if n]
    return f"dropped: {', '.join(parts)}" if parts else ""


def render_waterfall(trace: traces_pb2.Trace) -> str:
    """One line per span, indented by depth, with a bar placed on the trace's time axis (ms).

    Tool calls show `gen_ai.tool.name`; span events are listed under their span with their offset; a
    span that lost attributes, events, links or resource attributes says how many (`dropped_counts`).
    When the collector cut attribute values to fit its answer budget, the second line says how many
    (`cut_notice`). Names and attributes come from OTLP exporters (untrusted): printed through `for_terminal`.
    """
    spans = list(trace.spans)
    if not spans:
        return f"trace {for_terminal(trace.trace_id)}: no spans"
    t0, t1 = turn_axis(spans)
    total = max(t1 - t0, 1)
    children: dict[str, list[traces_pb2.Span]] = {}
    ids = {s.span_id for s in spans}
    for s in spans:
        parent = s.parent_span_id if s.parent_span_id in ids else ""
        children.setdefault(parent, []).append(s)
    lines = [f"trace {for_terminal(trace.trace_id)}  ({len(spans)} spans, {total / 1e6:.1f} ms)"]
    if notice := cut_notice(trace.truncated_value_count):
        lines.append(f"  {notice}")

    def walk(parent: str, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda x: (x.start_time_unix_nano, x.span_id)):
            if s.start_time_unix_nano > t1:  # after the turn (e.g. feedback.create): off the axis
                bar = f"+{_after(s.start_time_unix_nano - t1)} after the turn".rjust(_WIDTH)[-_WIDTH:]
            else:
                a = min(_WIDTH - 1, int((s.start_time_unix_nano - t0) / total * _WIDTH))
                b = min(_WIDTH, max(a + 1, int((s.end_time_unix_nano - t0) / total * _WIDTH)))
                bar = " " * a + "█" * (b - a) + " " * (_WIDTH - b)
            attrs = _attrs(s.attributes)
            label = s.name
            if toolcalls.is_tool_call(s.name, attrs) and toolcalls.tool_name(s.name, attrs) != s.name:
                label += f" [{toolcalls.tool_name(s.name, attrs)}]"
            status = traces_pb2.StatusCode.Name(s.status_code).removeprefix("STATUS_CODE_")
            dur = (s.end_time_unix_nano - s.start_time_unix_nano) / 1e6
            lines.append(f"{bar} {'  ' * depth}{for_terminal(label)}  {dur:.1f} ms  {status}  "
                         f"({for_terminal(s.service_name)})")
            if dropped := dropped_counts(s):
                lines.append(f"{' ' * _WIDTH} {'  ' * depth}  {dropped}")
            for e in s.events:
                off = (e.time_unix_nano - t0) / 1e6
                ea = _attrs(e.attributes)
                extra = " ".join(f"{k}={v}" for k, v in sorted(ea.items()))
                lines.append(f"{' ' * _WIDTH} {'  ' * depth}  • {for_terminal(e.name)} @{off:.1f} ms "
                             f"{for_terminal(extra)}".rstrip())
            walk(s.span_id, depth + 1)

    walk("", 0)
    return "\n".join(lines)


def render_feedback(fb: feedback_pb2.Feedback) -> str:
    """The owner's words, the snapshot, the anchors and the frozen tool calls of one row (and, when the
    copy was frozen from a GetTrace answer the collector cut, how many values were cut); every line is
    ours (multi-line text is split first), so the whole is passed through `for_terminal` keeping \\n."""
    snap = fb.snapshot
    ts = fb.trace_snapshot
    target = fb.WhichOneof("target")
    out = [
        f"{fb.name}  [{feedback_pb2.Status.Name(fb.status).removeprefix('STATUS_')}]"
        f"  author={feedback_pb2.Author.Name(fb.author).removeprefix('AUTHOR_')}"
        f"  sentiment={feedback_pb2.Sentiment.Name(fb.sentiment).removeprefix('SENTIMENT_')}"
        f"  category={feedback_pb2.Category.Name(fb.category).removeprefix('CATEGORY_')}",
        f"  created:   {fb.create_time.ToJsonString()}",
        f"  target:    {target} = {getattr(fb, target) if target else ''}",
        (f"  trace id:  {snap.trace_id or (fb.trace_id if target == 'trace_id' else '')}"
         f"  (turn {snap.turn_index + 1}, turn_index {snap.turn_index})"),
        *([f"  complaint turn: trace {fb.context_trace_id}  (where the owner spoke it; recorded by the agent)"]
          if fb.context_trace_id else []),
        "  owner's words:",
        *[f"    > {line}" for line in fb.body.splitlines() or [""]],
        f"  quoted target ({snap.target_role}, {snap.target_time.ToJsonString() if snap.HasField('target_time') else '?'}"
        f"{', clipped' if snap.target_text_clipped else ''}; source "
        f"{feedback_pb2.SnapshotSource.Name(snap.source).removeprefix('SNAPSHOT_SOURCE_')}):",
        *[f"    | {line}" for line in (snap.target_text[:600] + ("…" if len(snap.target_text) > 600 else "")).splitlines()],
        "  preceding user turn:",
        *[f"    | {line}" for line in snap.preceding_user_text[:400].splitlines()],
    ]
    ctx = snap.context
    if ctx.audio_key or ctx.dictation:
        out.append(f"  voice: audio_key={ctx.audio_key!r} dictation={ctx.dictation!r}")
    out.append(
        f"  frozen trace: {feedback_pb2.TraceSnapshotState.Name(ts.state).removeprefix('TRACE_SNAPSHOT_STATE_')}"
        f"  root={ts.root_status or '?'}  {ts.duration_ms:.1f} ms  spans={len(ts.spans)}"
    )
    if cut := frozen_cut_notice(ts.truncated_value_count):  # frozen from a GetTrace answer the collector cut
        out.append(f"    {cut}")
    for tc in ts.tool_calls:
        out.append(f"    tool {tc.name} ({tc.call_id}) {tc.status} {tc.duration_ms:.1f} ms result {tc.result_size_bytes} bytes")
    for ev in ts.events:
        out.append(f"    event {ev.name} {_attrs(ev.attributes)}")
    return for_terminal("\n".join(out), keep="\n")
