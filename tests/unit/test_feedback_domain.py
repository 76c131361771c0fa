"""Pure rules of services/feedback/domain.py, evidence.py and ticket.py: limits, snapshots, status
machine, capture decisions, frozen spans, rating checks, trend filling and the ticket draft's field policy."""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.etags import etag, etag_matches
from google.protobuf import json_format

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.feedback import codec, evidence, ticket
from services.feedback import domain as d
from services.feedback.model.report import Context, Snapshot, ToolCall
from services.feedback.model.statistics import DailyCount
from tests.helpers.domain import msg, span

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize("n", [1, 3999, 4000])
def test_body_up_to_4000_code_points_is_kept_exactly(n):
    body = ("😀é" * n)[:n]
    assert d.check_body(body) == body


@pytest.mark.parametrize("body,reason", [("x" * 4001, "TOO_LONG"), ("ok\x00bad", "NUL_CHARACTER"), ("  ", "INVALID_ARGUMENT")])
def test_body_over_limit_nul_or_blank_is_rejected_naming_the_field(body, reason):
    with pytest.raises(InvalidArgument) as e:
        d.check_body(body)
    assert e.value.field_path == "feedback.body" and e.value.reason == reason
    if reason == "TOO_LONG":
        assert e.value.metadata["limit"] == "4000"


def test_snapshot_clips_target_to_2000_and_preceding_to_1000_and_says_so():
    user = msg("ROLE_USER", "u" * 1500, channel="CHANNEL_VOICE", audio_key="a/1", dictation="heard")
    reply = msg("ROLE_ASSISTANT", "r" * 2500, model="m1", agent="reference")
    s = d.build_snapshot(reply, [user, reply], client_version="web/1.2")
    assert s.target_text == "r" * 2000 and s.target_text_clipped
    assert s.preceding_user_text == "u" * 1000 and s.preceding_user_text_clipped
    assert s.context == Context(agent="reference", model="m1", audio_key="a/1", dictation="heard",
                                client_version="web/1.2", channel="CHANNEL_VOICE")
    assert s.target_time == dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC) and s.source == d.SOURCE_CHAT


def test_snapshot_of_a_user_message_uses_it_as_the_preceding_turn():
    user = msg("ROLE_USER", "hi")
    s = d.build_snapshot(user, [user])
    assert s.preceding_user_text == "hi" and not s.target_text_clipped


def test_client_snapshot_is_marked_client_and_clipped():
    s = d.client_snapshot(Snapshot(target_text="x" * 2001, preceding_user_text="y", source=d.SOURCE_CHAT))
    assert s.source == d.SOURCE_CLIENT and len(s.target_text) == 2000 and s.target_text_clipped
    with pytest.raises(InvalidArgument):
        d.client_snapshot(Snapshot(target_text="a\x00"))


@pytest.mark.parametrize("field", sorted(d.CLIENT_SNAPSHOT_FIELD_MAX_CHARS))
def test_client_snapshot_role_and_context_are_checked_for_nul_and_length(field):
    """They reached PostgreSQL unchecked: NUL was INTERNAL, a 1 MB channel was stored."""
    def snap(value):
        if field.startswith("context."):
            return Snapshot(target_text="t", context=Context(**{field.removeprefix("context."): value}))
        return Snapshot(target_text="t", **{field: value})
    limit = d.CLIENT_SNAPSHOT_FIELD_MAX_CHARS[field]
    assert d.client_snapshot(snap("a" * limit)).source == d.SOURCE_CLIENT
    for bad, reason in (("a\x00b", "NUL_CHARACTER"), ("a" * (limit + 1), "TOO_LONG")):
        with pytest.raises(InvalidArgument) as e:
            d.client_snapshot(snap(bad))
        assert e.value.field_path == f"client_snapshot.{field}" and e.value.reason == reason


def test_pick_target_prefers_the_reply():
    u, r = msg("ROLE_USER", "q"), msg("ROLE_ASSISTANT", "a")
    assert d.pick_target([u, r]) is r and d.pick_target([u]) is u and d.pick_target([]) is None


@pytest.mark.parametrize("cur,new,ok", [
    (d.STATUS_OPEN, d.STATUS_TRIAGED, True), (d.STATUS_TRIAGED, d.STATUS_FILED, True),
    (d.STATUS_TRIAGED, d.STATUS_DISMISSED, True), (d.STATUS_FILED, d.STATUS_OPEN, True),
    (d.STATUS_DISMISSED, d.STATUS_OPEN, True), (d.STATUS_FILED, d.STATUS_TRIAGED, False),
    (d.STATUS_DISMISSED, d.STATUS_FILED, False), (d.STATUS_FILED, d.STATUS_DISMISSED, False),
])
def test_status_machine(cur, new, ok):
    if ok:
        d.check_transition(cur, new)
    else:
        with pytest.raises(FailedPrecondition):
            d.check_transition(cur, new)


def test_the_update_feedback_proto_comment_lists_exactly_the_transitions_the_service_allows():
    """A client reads the allowed status changes in feedback.proto's UpdateFeedback comment: every
    `A → B` written there is allowed by check_transition, and every change it allows is written there
    (OPEN → FILED / DISMISSED were allowed but not listed)."""
    proto = (Path(__file__).parents[2] / "protos/agentfeedback/feedback/v1/feedback.proto").read_text()
    lines = proto[:proto.index("rpc UpdateFeedback(")].splitlines()
    comment = []
    for line in reversed(lines[:-1] if lines[-1].strip() == "" else lines):
        if not line.strip().startswith("//"):
            break
        comment.insert(0, line.strip()[2:])
    text = " ".join(comment)
    names = {v: k for k, v in d.STATUS_NAMES.items()}
    listed = {(names[a], names[b]) for a, b in re.findall(r"\b([A-Z]+) → ([A-Z]+)\b", text)}
    allowed = set()
    for cur in names.values():
        for new in names.values():
            if cur == new:
                continue
            try:
                d.check_transition(cur, new)
                allowed.add((cur, new))
            except FailedPrecondition:
                pass

    def named(pairs):
        return sorted(f"{d.STATUS_NAMES[a]} → {d.STATUS_NAMES[b]}" for a, b in pairs)
    assert named(listed) == named(allowed), text


def test_update_mask_refuses_body_and_unknown_paths():
    assert d.check_update_mask(["status", "issue_url"]) == {"status", "issue_url"}
    with pytest.raises(InvalidArgument) as e:
        d.check_update_mask(["body"])
    assert e.value.reason == "IMMUTABLE_FIELD"
    for bad in ([], ["owner"]):
        with pytest.raises(InvalidArgument):
            d.check_update_mask(bad)


def test_etags():
    assert etag_matches("", 3, "a") and etag_matches(etag(3, "a"), 3, "a")
    assert not etag_matches(etag(2, "a"), 3, "a") and not etag_matches(etag(3, "b"), 3, "a")


def test_capture_waits_for_a_root_and_a_stable_span_count_then_freezes():
    root = span("r" * 16, name="chat.turn", dur_ms=50)
    tool = span("t" * 16, parent="a" * 16, name="tool.call", start_ms=10, dur_ms=5,
                attributes={"gen_ai.tool.name": "list_agents", "gen_ai.tool.call.id": "c1",
                            "tool.result.size_bytes": 9000.0},
                events=(evidence.SpanEventView("chat.truncated", 12_000_000, {"kept": 4096}),))
    agent = span("a" * 16, parent="r" * 16, name="agent.think", start_ms=5, dur_ms=30, service="agent")
    mine = span("f" * 16, parent="9" * 16, name="feedback.create")
    kw = dict(attempts=1, max_attempts=5, base_backoff_s=0.5, expired=False)
    assert evidence.decide_capture(None, previous_count=-1, **kw).state == d.TRACE_PENDING
    no_root = evidence.decide_capture([agent, tool], previous_count=-1, **kw)
    assert no_root.state == d.TRACE_PENDING and no_root.span_count == 2
    first = evidence.decide_capture([root, agent, tool, mine], previous_count=-1, **kw)
    assert first.state == d.TRACE_PENDING and first.span_count == 3  # our own span is not evidence
    done = evidence.decide_capture([root, agent, tool, mine], previous_count=3, **kw)
    assert done.state == d.TRACE_CAPTURED
    f = done.frozen
    assert f.tool_calls == (ToolCall(name="list_agents", call_id="c1", status="OK", duration_ms=5.0,
                                     arguments="", result="", result_size_bytes=9000, span_id="t" * 16),)
    assert [e.name for e in f.events] == ["chat.truncated"]
    assert f.root_status == "OK" and f.duration_ms == 50.0
    assert {s.name: s.start_offset_ms for s in f.spans} == {"chat.turn": 0.0, "agent.think": 5.0,
                                                            "tool.call": 10.0}


def test_capture_gives_up_as_unavailable_or_expired():
    kw = dict(previous_count=0, base_backoff_s=1.0)
    assert evidence.decide_capture(None, attempts=5, max_attempts=5, expired=False, **kw).state == d.TRACE_UNAVAILABLE
    assert evidence.decide_capture([], attempts=1, max_attempts=5, expired=True, **kw).state == d.TRACE_EXPIRED
    assert evidence.backoff_s(1, 1.0) == 1.0 and evidence.backoff_s(3, 1.0) == 4.0
    assert evidence.backoff_s(30, 1.0) == evidence.MAX_BACKOFF_S


def test_spans_expired_after_the_retention_window():
    assert d.spans_expired(T0, T0 + dt.timedelta(days=15), 14)
    assert not d.spans_expired(T0, T0 + dt.timedelta(days=13), 14)
    assert not d.spans_expired(None, T0, 14)


def test_rating_checks():
    key = d.RatingKey("instances/i", 0, d.SCOPE_MESSAGE, "reaction", "")
    d.check_rating(key, "é" * 4096, 8192)
    with pytest.raises(InvalidArgument) as e:
        d.check_rating(key, "é" * 4096 + "x", 8192)
    assert e.value.field_path == "rating.note" and e.value.metadata["limit"] == "8192"
    for bad, field_path in [(d.RatingKey("instances/i", 0, d.SCOPE_MESSAGE, "Tone!", ""), "rating.aspect"),
                            (d.RatingKey("instances/i", 0, d.SCOPE_ARTIFACT, "tone", ""), "rating.artifact_id"),
                            (d.RatingKey("instances/i", -1, d.SCOPE_MESSAGE, "tone", ""), "rating.turn_index"),
                            (d.RatingKey("instances/i", 0, 0, "tone", ""), "rating.scope")]:
        with pytest.raises(InvalidArgument) as e:
            d.check_rating(bad, "", 8192)
        assert e.value.field_path == field_path
    assert d.rating_mask([]) == d.RATING_MASK_PATHS and d.rating_mask(["note"]) == {"note"}
    with pytest.raises(InvalidArgument):
        d.rating_mask(["version"])


def test_trend_has_one_entry_per_day_with_zeros():
    day = dt.date(2026, 11, 30)
    rows = [DailyCount(day, positive=2), DailyCount(day, reports=1), DailyCount(day - dt.timedelta(days=2), negative=1)]
    trend = d.fill_trend(rows, day, 4)
    assert [t.day.isoformat() for t in trend] == ["2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30"]
    assert [(t.positive, t.negative, t.reports) for t in trend] == [(0, 0, 0), (0, 1, 0), (0, 0, 0),
                                                                             (2, 0, 1)]


def render(fb: dict, fields: ticket.TicketFields = ticket.TicketFields()) -> tuple[str, str]:
    """The ticket of a report given as proto JSON (as the API returns it), rendered from the model."""
    return ticket.render_ticket(codec.report_from_pb(json_format.ParseDict(fb, pb.Feedback())), fields)


def test_ticket_leaves_owner_words_and_message_text_out_unless_enabled():
    fb = {"name": "feedback/f1", "instance": "instances/i", "message": "instances/i/messages/m", "category": 3,
          "sentiment": 2, "body": "my private words",
          "snapshot": {"trace_id": "ab" * 16, "turn_index": 2, "target_text": "the reply text",
                       "preceding_user_text": "the question", "context": {"dictation": "dictated"}},
          "trace_snapshot": {"state": 2, "tool_calls": [{"name": "list_agents", "status": "ERROR",
                                                         "duration_ms": 3.5, "result_size_bytes": "12"}],
                             "events": [{"name": "chat.invented_result", "span_id": "s1"}]}}
    title, body = render(fb)
    assert "tool failure" in title and "ab" * 16 in body and "list_agents | " in body and "chat.invented_result" in body
    assert "my private words" not in body and "the reply text" not in body and "dictated" not in body
    _, full = render(fb, ticket.TicketFields(body=True, message_text=True))
    assert "> my private words" in full and "> the reply text" in full and "> the question" in full


def test_ticket_of_an_agent_recorded_report_says_the_agent_recorded_the_words():
    fb = {"name": "feedback/f3", "instance": "instances/i", "trace_id": "cd" * 16, "author": d.AUTHOR_AGENT,
          "body": "the owner says the count was wrong", "snapshot": {}, "trace_snapshot": {}}
    _, body = render(fb, ticket.TicketFields(body=True))
    assert "### The owner's words, as the agent recorded them\n\n> the owner says the count was wrong" in body
    _, by_user = render({**fb, "author": 1}, ticket.TicketFields(body=True))
    assert "### The owner's words\n\n> the owner says" in by_user


@pytest.mark.parametrize("url", ["https://", "https://exa mple.com/", "file:///etc/passwd", "ftp://x.example/a",
                                 "//x.example/a", "https://x.example/\ta", "https://x.example:99999/",
                                 "https://x.example/" + "a" * 2048,
                                 # bidi override, zero-width space and C1 control (read as another host or
                                 # hidden), user info (`github.com@` reads as GitHub), an unparsable host
                                 "https://exa\u202emple.com/", "https://git\u200bhub.com/", "https://x.example/\x9b",
                                 "https://github.com@evil.example/o/r/issues/1", "https://u:p@x.example/",
                                 "https://[::1/", "https://x.example:0/"])
def test_issue_url_rejects_anything_but_an_absolute_http_url_with_a_host(url):
    with pytest.raises(InvalidArgument) as e:
        d.check_issue_url(url)
    assert e.value.field_path == "feedback.issue_url"


@pytest.mark.parametrize("url", ["", "https://github.com/o/r/issues/1", "http://127.0.0.1:8080/t?id=1#c"])
def test_issue_url_accepts_http_urls_and_empty(url):
    assert d.check_issue_url(url) == url


def test_ticket_of_a_coding_session_report_shows_the_session_and_seq_and_no_empty_fields():
    # As the servicer builds the draft: proto JSON field names, int64 as a string, defaults omitted.
    fb = {"name": "feedback/f2", "coding": {"session": "sess-42", "timeline_seq": "17"}, "category": 3,
          "sentiment": 2, "author": 2, "surface": 2, "snapshot": {"source": 3}, "trace_snapshot": {},
          "create_time": "2026-11-30T12:00:00Z"}
    title, body = render(fb)
    assert "coding session sess-42" in title and "17" in title and "?" not in title
    assert "- coding session: `sess-42`" in body and "- timeline seq: 17" in body
    assert "``" not in body and "instance:" not in body and "message:" not in body and "turn index" not in body
    assert "trace id:" not in body and "agent / model" not in body


def test_ticket_of_a_trace_report_names_the_trace_and_of_turn_zero_names_the_turn():
    title, body = render({"name": "feedback/f3", "trace_id": "cd" * 16, "snapshot": {}})
    assert ("cd" * 16) in title and "instance:" not in body and "turn" not in title
    title, body = render({"name": "feedback/f4", "instance": "instances/i", "message": "instances/i/messages/m",
                                   "snapshot": {"target_role": "ROLE_ASSISTANT", "trace_id": "ab" * 16}})
    # People's numbering in the title (Turn 1 = turn_index 0), the API's index next to it.
    assert title.endswith("turn 1 of instances/i") and "- turn: 1" in body and "- turn index: 0" in body


def test_ticket_of_an_agent_report_names_the_complaint_turn():
    """An agent-recorded report carries the turn in which the owner spoke the complaint (context_trace_id)."""
    title, body = render({"name": "feedback/f5", "instance": "instances/i", "message": "instances/i/messages/m",
                          "author": 2, "context_trace_id": "ef" * 16,
                          "snapshot": {"target_role": "ROLE_ASSISTANT", "trace_id": "ab" * 16, "turn_index": 2}})
    assert title.endswith("turn 3 of instances/i")
    assert f"- complaint turn (trace id): `{'ef' * 16}`" in body and "- author: agent" in body
    _, plain = render({"name": "feedback/f6", "instance": "instances/i", "message": "instances/i/messages/m",
                       "snapshot": {"target_role": "ROLE_ASSISTANT", "trace_id": "ab" * 16}})
    assert "complaint turn" not in plain
