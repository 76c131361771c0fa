"""Pure rules of the chat gateway (no servers)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.chat import domain
from services.chat.domain import Channel, Message, MessagePage, Role
from services.common import pages
from services.common.errors import InvalidArgument


def test_agent_timeout_forwards_callers_time_less_reserve_and_caps():
    assert domain.agent_timeout(None, 120.0) == 120.0  # no caller deadline: the cap, nothing more
    assert domain.agent_timeout(500.0, 120.0) == 120.0
    assert domain.agent_timeout(1.0, 120.0) == pytest.approx(0.75)  # 25 % reserve
    assert domain.agent_timeout(0.1, 120.0) == pytest.approx(0.05)  # at least 50 ms reserve
    assert domain.agent_timeout(60.0, 120.0) == pytest.approx(59.0)  # at most 1 s reserve
    assert domain.agent_timeout(0.0, 120.0) == 0.001


def test_sanitize_reply_replaces_nul_and_counts():
    assert domain.sanitize_reply("ok\x00bad\x00") == ("ok\ufffdbad\ufffd", 2)
    assert domain.sanitize_reply("fine") == ("fine", 0)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"instance": "instances/a/b"}, "instance"),
        ({"content": ""}, "content"),
        ({"content": "a\x00"}, "content"),
        ({"content": "x" * 11}, "content"),
        ({"channel": 7}, "channel"),
        ({"audio_key": "k\x00"}, "audio_key"),
        ({"dictation": "d\x00"}, "dictation"),
        ({"request_id": "nope"}, "request_id"),
    ],
)
def test_validate_turn_names_the_bad_field(kwargs, field):
    args = {
        "instance": "instances/a",
        "content": "hi",
        "channel": 0,
        "audio_key": "",
        "dictation": "",
        "request_id": "",
        "max_content_chars": 10,
    } | kwargs
    with pytest.raises(InvalidArgument) as e:
        domain.validate_turn(**args)
    assert e.value.field_path == field


def test_validate_turn_infers_channel():
    t = domain.validate_turn("instances/a", "hi", 0, "audio/1", "", "", 10)
    assert t.channel == Channel.VOICE and t.instance_id == "a"
    assert domain.validate_turn("instances/a", "hi", 0, "", "", "", 10).channel == Channel.TEXT


def test_message_page_token_roundtrip_and_binding():
    t = datetime(2026, 5, 6, 7, 8, 9, 999999, tzinfo=UTC)
    m = Message("i", "abc", Role.USER, "x", "0" * 31 + "1", 0, t)
    tok = pages.issue(MessagePage.key(m), "i||")
    page = MessagePage.of(pages.read(tok, "i||"))
    assert page.after_time == t and page.after_id == "abc"
    with pytest.raises(InvalidArgument):
        pages.read(tok, "other||")
    with pytest.raises(InvalidArgument):
        pages.read("garbage!", "i||")


def test_time_from_ns_keeps_microseconds():
    ns = 1_790_000_000_123_456_789
    assert domain.to_us(domain.time_from_ns(ns)) == ns // 1000


@pytest.mark.parametrize("name,code_point", [
    ("x\u202egnp.exe", "U+202E"), ("a\u2066b", "U+2066"), ("tab\tname", "U+0009"), ("line\u2028two", "U+2028"),
    ("odd\ufffe", "U+FFFE"), ("c1\x85", "U+0085"),
])
def test_an_agent_name_that_would_read_differently_in_a_list_is_refused(name, code_point):
    """A display name holding U+202E shows "x" + U+202E + "gnp.exe" as "xexe.png" in the Agents list."""
    with pytest.raises(InvalidArgument) as e:
        domain.validate_new_instance(name, "", "", "", "abc")
    assert e.value.field_path == "instance.display_name" and e.value.reason == "UNSAFE_CHARACTER"
    assert code_point in str(e.value) and name not in str(e.value)


def test_names_in_any_script_and_with_emoji_are_kept():
    for name in ("Küche", "مطبخ", "台所 🍳", "Kitchen – 2"):
        assert domain.validate_new_instance(name, "", "", "", "abc").display_name == name
