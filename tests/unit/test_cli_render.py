"""The CLI's waterfall (`agentfeedback trace get`, the demo's evidence): the turn keeps the axis."""
from __future__ import annotations

from agentfeedback.feedback.v1 import feedback_pb2
from agentfeedback.traces.v1 import traces_pb2

from services.cli.render import render_feedback, render_waterfall

MS = 1_000_000
T0 = 1_790_000_000_000 * MS


def _span(span_id: str, name: str, start_ms: float, end_ms: float, parent: str = "") -> traces_pb2.Span:
    return traces_pb2.Span(span_id=span_id, parent_span_id=parent, name=name, service_name="chat",
                           start_time_unix_nano=T0 + int(start_ms * MS), end_time_unix_nano=T0 + int(end_ms * MS))


def _bar(line: str) -> str:
    return line[:40]


def test_a_span_recorded_minutes_after_the_turn_does_not_squash_the_turn():
    trace = traces_pb2.Trace(trace_id="ab" * 16, spans=[
        _span("r" * 16, "chat.turn", 0, 10),
        _span("t" * 16, "tool.call", 2, 6, parent="r" * 16),
        # The feedback service's span on the turn's trace, when the owner flags the reply 3 minutes later.
        _span("f" * 16, "feedback.create", 180_000, 180_004, parent="r" * 16),
    ])
    lines = render_waterfall(trace).splitlines()
    assert "(3 spans, 10.0 ms)" in lines[0]  # the axis is the turn's 10 ms, not 3 minutes
    tool = next(x for x in lines if "tool.call" in x)
    assert _bar(tool).count("█") == 16  # 4 of 10 ms on a 40-column axis
    assert _bar(tool).index("█") == 8
    later = next(x for x in lines if "feedback.create" in x)
    assert "█" not in _bar(later) and "+3 min after the turn" in later


def test_a_turn_alone_spans_the_whole_axis():
    trace = traces_pb2.Trace(trace_id="cd" * 16, spans=[
        _span("r" * 16, "chat.turn", 0, 8), _span("a" * 16, "agent.think", 1, 9, parent="r" * 16)])
    lines = render_waterfall(trace).splitlines()
    assert "(2 spans, 9.0 ms)" in lines[0]  # a child that ends after its root still fits
    assert _bar(next(x for x in lines if "agent.think" in x)).endswith("█")


def test_feedback_show_numbers_the_turn_from_one_and_names_the_complaint_turn():
    fb = feedback_pb2.Feedback(name="feedback/f", author=feedback_pb2.AUTHOR_AGENT, context_trace_id="ef" * 16,
                               snapshot=feedback_pb2.Snapshot(trace_id="ab" * 16, turn_index=2))
    text = render_feedback(fb)
    assert "(turn 3, turn_index 2)" in text
    assert f"complaint turn: trace {'ef' * 16}" in text
    assert "complaint turn" not in render_feedback(feedback_pb2.Feedback(name="feedback/g"))


def test_a_trace_cut_to_fit_the_answer_budget_says_how_many_values_were_cut():
    """`agentfeedback trace get` on a GetTrace answer whose values the collector cut (5f77851): the
    second line says how many; an uncut trace says nothing of it."""
    trace = traces_pb2.Trace(trace_id="ab" * 16, truncated_value_count=360, spans=[_span("r" * 16, "chat.turn", 0, 10)])
    lines = render_waterfall(trace).splitlines()
    assert lines[1].strip() == ("360 attribute values were cut to fit the answer (GetTrace answer budget); "
                                "each cut value ends with …(+N chars)")
    one = traces_pb2.Trace(trace_id="ab" * 16, truncated_value_count=1, spans=[_span("r" * 16, "chat.turn", 0, 10)])
    assert "1 attribute value was cut to fit the answer" in render_waterfall(one)
    whole = render_waterfall(traces_pb2.Trace(trace_id="ab" * 16, spans=[_span("r" * 16, "chat.turn", 0, 10)]))
    assert "cut" not in whole and len(whole.splitlines()) == 2


def test_a_span_that_lost_attributes_events_links_or_resource_attributes_says_how_many():
    root = _span("r" * 16, "chat.turn", 0, 10)
    root.resource_dropped_attributes_count, root.dropped_attributes_count = 61, 2
    child = _span("t" * 16, "tool.call", 2, 6, parent="r" * 16)
    child.dropped_events_count, child.dropped_links_count = 1, 3
    plain = _span("p" * 16, "agent.think", 6, 8, parent="r" * 16)
    lines = render_waterfall(traces_pb2.Trace(trace_id="ab" * 16, spans=[root, child, plain])).splitlines()

    def below(name: str) -> str:  # the line under the span's own line
        return lines[next(i for i, x in enumerate(lines) if f" {name}  " in x) + 1].strip()

    assert below("chat.turn") == "dropped: 2 attributes, 61 resource attributes"
    assert below("tool.call") == "dropped: 1 event, 3 links"
    assert sum("dropped:" in x for x in lines) == 2  # agent.think lost nothing: no line


def test_feedback_show_says_the_frozen_copy_came_from_a_cut_answer():
    cut = feedback_pb2.Feedback(name="feedback/f", trace_snapshot=feedback_pb2.TraceSnapshot(
        state=feedback_pb2.TRACE_SNAPSHOT_STATE_CAPTURED, truncated_value_count=12))
    assert ("frozen from a cut answer: 12 attribute values were cut to fit the answer (GetTrace answer budget)"
            in render_feedback(cut))
    assert "cut" not in render_feedback(feedback_pb2.Feedback(name="feedback/g"))
