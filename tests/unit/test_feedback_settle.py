"""The capture's settle rule (issue 16): a turn whose spans stopped arriving is frozen with what is
there once `capture_settle_s` passed, marked incomplete naming what is missing, and completed later."""
from __future__ import annotations

from services.feedback.evidence import SpanView, decide_capture
from services.feedback.model.enums import TraceState

AGENT = SpanView("a1", "r1", "agent.think", "agent", "OK", 10, 20)
TOOL = SpanView("t1", "a1", "tool.call", "agent", "OK", 11, 12, {"gen_ai.tool.name": "lookup"})
ROOT = SpanView("r1", "", "chat.turn", "chat", "OK", 0, 30)
KW = {"attempts": 3, "max_attempts": 20, "base_backoff_s": 1.0, "expired": False}


def test_before_the_settle_deadline_a_rootless_trace_waits_but_never_past_the_deadline():
    d = decide_capture([AGENT, TOOL], previous_count=2, settle_in_s=0.5, **KW)
    assert d.state == TraceState.PENDING and d.retry_in_s <= 0.5


def test_after_the_settle_deadline_it_is_frozen_incomplete_naming_what_never_came():
    d = decide_capture([AGENT, TOOL], previous_count=2, settle_in_s=-0.1, recheck_every_s=5, **KW)
    assert d.state == TraceState.CAPTURED
    assert d.frozen.missing == ("chat.turn", "chat.in", "chat.out")
    assert [c.name for c in d.frozen.tool_calls] == ["lookup"]
    assert d.recheck_in_s is not None and d.recheck_in_s <= 5


def test_an_incomplete_copy_is_completed_when_the_missing_spans_arrive_and_then_left_alone():
    same = decide_capture([AGENT, TOOL], previous_count=2, recheck=True, **KW)
    assert same.frozen is None and same.recheck_in_s is not None  # nothing new: look again later
    done = decide_capture([ROOT, AGENT, TOOL], previous_count=2, recheck=True, **KW)
    assert done.state == TraceState.CAPTURED and done.frozen.missing == () and done.recheck_in_s is None
    assert done.span_count == 3


def test_rechecks_stop_after_the_completion_window():
    d = decide_capture([AGENT], previous_count=1, recheck=True, recheck_window_over=True, **KW)
    assert d.recheck_in_s is None


def test_a_complete_turn_is_frozen_complete_as_before():
    d = decide_capture([ROOT, AGENT, TOOL], previous_count=3, settle_in_s=50, **KW)
    assert d.state == TraceState.CAPTURED and d.frozen.missing == () and d.recheck_in_s is None
