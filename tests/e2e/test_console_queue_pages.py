"""The review queue across pages, and reports whose turn was removed (issue 28), in both real engines
against the real stack through Envoy:
- strictly newest first across "Load more": 3 negative judgements, then 60 reports, then 3 more
  judgements (the queue reads 50 of each list a page). The first screen shows the 3 newest judgements and
  the 50 newest reports, and holds the 3 older judgements back (the 10 reports not read yet are newer than
  them); Load more shows the other 10 reports and then those 3: the rows equal the API's items merged by
  time, newest first, on every page; the same with the agent filter (one conversation's judgements);
- a report whose turn the owner deleted (DeleteTurn: Feedback.turn_removed_time) says "turn removed
  <time>" on its queue row, on its item (the conversation panel says why it is empty) and on the Feedback
  table's row and expanded report; the tool calls frozen with it are still shown.
Chromium at 1280 px (then the removed report's item at 320 px), WebKit (WebKitGTK) at 320 px; nothing
scrolls sideways at 320 px. Screenshots: test-artifacts/<engine>-<width>-queue-pages*.png, *-turn-removed*.png.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime

import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf import field_mask_pb2

from tests.helpers.console import QUESTION
from tests.helpers.engines import chromium, webkit
from tests.helpers.feedback import flag, list_all, send, wait_state
from tests.helpers.grpcweb import in_console

pytestmark = pytest.mark.browser
PAGE = 50  # the queue's page of each list (console/src/pages/queue.ts)
REPORTS = 60
ROWS = "[...document.querySelectorAll('.queue-row')].map((r) => r.dataset.name)"
CURRENT = "document.querySelector('.queue-item') && document.querySelector('.queue-item').dataset.name"


@dataclass
class Seeded:
    pager: str            # instances/<id> holding every paged item
    # queue URL query → (ListRatings + ListFeedback merged by time, newest first; how many of them the
    # first screen shows: the rest wait for Load more)
    expected: dict[str, tuple[list[str], int]]
    removed: str          # feedback/<id> of the report whose turn was deleted
    removed_time: datetime
    removed_tools: int    # tool calls frozen with it


async def _seed(stack) -> Seeded:
    chat, fb, md = stack.chat(), stack.feedback(), stack.md()

    async def agent(name: str) -> str:
        return (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name=name, agent="reference"), request_id=str(uuid.uuid4())),
            metadata=md)).name

    async def judge(inst: str, turn: int, aspect: str) -> None:
        await fb.PutRating(pb.PutRatingRequest(
            rating=pb.Rating(conversation=inst, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect=aspect,
                             sentiment=pb.RATING_SENTIMENT_NEGATIVE),
            update_mask=field_mask_pb2.FieldMask(paths=["sentiment"]), request_id=str(uuid.uuid4())), metadata=md)

    pager, tools = await agent("Pager"), await agent("Tool desk")
    replies = [(await send(stack, pager, f"question {i}")).reply.name for i in range(3)]
    for turn in range(3):  # the oldest judgements
        await judge(pager, turn, "reaction")
    for i in range(REPORTS):
        await flag(stack, replies[i % 3], body=f"paged report {i}", surface=pb.SURFACE_CHAT)
    for turn in range(3):  # the newest judgements
        await judge(pager, turn, "reply_judgement")

    # The report whose turn is deleted: a turn with tool calls, frozen first (then the turn goes).
    turn = await send(stack, tools, QUESTION)
    await stack.wait_trace(turn.trace_id, min_spans=3)
    report = await flag(stack, turn.reply.name, body="The tool gave the wrong count.", surface=pb.SURFACE_CHAT,
                        category=pb.CATEGORY_TOOL_FAILURE)
    frozen = await wait_state(stack, report.name, pb.TRACE_SNAPSHOT_STATE_CAPTURED)
    assert frozen.trace_snapshot.tool_calls, "the turn's tool calls were frozen"
    await chat.DeleteTurn(chat_pb2.DeleteTurnRequest(parent=tools, trace_id=turn.trace_id), metadata=md)
    removed = next(f for f in await list_all(stack) if f.name == report.name)
    assert removed.HasField("turn_removed_time")

    judgements, token = [], ""
    while True:
        r = await fb.ListRatings(pb.ListRatingsRequest(conversation="instances/-", sentiment=pb.RATING_SENTIMENT_NEGATIVE,
                                                       origin=pb.RATING_ORIGIN_USER, page_token=token), metadata=md)
        judgements += r.ratings
        token = r.next_page_token
        if not token:
            break
    reports = await list_all(stack, status=pb.STATUS_OPEN)
    assert len(judgements) == 6 and len(reports) == REPORTS + 1

    def at(t) -> tuple[int, int]:
        return t.seconds, t.nanos

    def expect(reports: list[pb.Feedback]) -> tuple[list[str], int]:
        # Newest first; at the same time a report before a judgement (the queue's tie rule).
        items = [(at(f.create_time), 1, f.name) for f in reports] + [(at(r.update_time), 0, r.name) for r in judgements]
        merged = [name for *_, name in sorted(items, reverse=True)]
        # The first screen: what is at least as new as the 50th report (the oldest position reports reached).
        cut = sorted((at(f.create_time) for f in reports), reverse=True)[PAGE - 1]
        first = sum(1 for t, kind, _ in items if (t, kind) >= (cut, 1))
        assert first == PAGE + 3, "three judgements wait for the older reports"
        return merged, first

    expected = {"": expect(reports), f"?agent={pager.split('/')[-1]}": expect([f for f in reports if f.instance == pager])}
    return Seeded(pager, expected, removed.name, removed.turn_removed_time.ToDatetime(),
                  len(frozen.trace_snapshot.tool_calls))


def _until(b, expression: str, want, what: str, timeout_s: float = 15.0):
    end = time.monotonic() + timeout_s
    while (got := b.js(expression)) != want:
        assert time.monotonic() < end, f"{what}: {got!r}, want {want!r}"
        time.sleep(0.1)
    return got


def _sign_in(b, site: str, gateway_url: str, token: str) -> None:
    b.goto(f"{site}/?gateway={gateway_url}#/signin")
    b.fill("#token", token)
    b.click("button[type=submit]")
    b.wait("h1", "Agents")


def _pages(b, engine: str, width: int, site: str, s: Seeded) -> None:
    """Newest first on the first screen and after Load more, without and with the agent filter."""
    for query, (merged, first) in s.expected.items():
        b.goto(f"{site}/#/queue{query}")
        b.wait(".queue-item")
        b.wait(".queue-count", "so far")
        got = _until(b, ROWS, merged[:first], f"{engine}: the first screen of {query!r}, newest first")
        assert len(got) == first and not b.js("document.querySelector('.load-more').hidden")
        if not query:
            b.shot(f"{engine}-{width}-queue-pages-first")
        b.click(".load-more")
        _until(b, ROWS, merged, f"{engine}: every row after Load more, newest first ({query!r})")
        _until(b, "document.querySelector('.load-more').hidden", True, f"{engine}: nothing more to load ({query!r})")
        b.wait(".queue-count", f"{len(merged)} items")
    b.shot(f"{engine}-{width}-queue-pages-all")


def _removed(b, engine: str, width: int, site: str, s: Seeded, stamp: str) -> None:
    """"turn removed <time>" on the queue row and item, the frozen evidence still shown; the Feedback table."""
    row = f".queue-row[data-name='{s.removed}']"
    b.goto(f"{site}/#/queue?item={s.removed.split('/')[-1]}")
    _until(b, CURRENT, s.removed, f"{engine}: the removed report's item")
    b.wait(f"{row} .badge.turn-removed", f"turn removed {stamp}")
    b.wait(".queue-item .fb-head .badge.turn-removed", f"turn removed {stamp}")
    b.wait(".queue-item .qi-removed-note", f"The turn was removed {stamp}")
    b.wait(".queue-item .qi-conv .unavailable", "Conversation unavailable")
    _until(b, "document.querySelectorAll('.queue-item .frozen-tools .tool-call-frozen').length", s.removed_tools,
           f"{engine}: the frozen tool calls of the removed turn")
    assert b.js("document.querySelector('.queue-item .frozen-tools').open") is True
    b.shot(f"{engine}-{width}-queue-turn-removed")
    if width <= 320:
        m = b.measure()
        assert m["scrollWidth"] <= m["innerWidth"], f"{engine} {width}: the removed item scrolls sideways"
    b.goto(f"{site}/#/feedback?highlight={s.removed}")
    tr = f"tr.dt-row[data-key='{s.removed}']"
    b.wait(".feedback-row.focused .badge.turn-removed", f"turn removed {stamp}")
    b.wait(".feedback-row.focused .conv-link", "the turn was removed")
    assert b.js("document.querySelectorAll('.feedback-row.focused .tool-call-frozen').length") == s.removed_tools
    b.wait(f"{tr} .badge.turn-removed", f"turn removed {stamp}")
    b.shot(f"{engine}-{width}-feedback-turn-removed")
    if width <= 320:
        m = b.measure()
        assert m["scrollWidth"] <= m["innerWidth"], f"{engine} {width}: the Feedback table scrolls sideways"


def _local(b, when: datetime) -> str:
    """The console's time text (dom.ts timeEl: the viewer's local time) of `when`."""
    ms = int(when.timestamp() * 1000)
    return b.js(f"(() => {{ const d = new Date({ms}); const p = (n) => String(n).padStart(2, '0');"
                f" return `${{d.getFullYear()}}-${{p(d.getMonth() + 1)}}-${{p(d.getDate())}} ${{p(d.getHours())}}:${{p(d.getMinutes())}}:${{p(d.getSeconds())}}`; }})()")


def _chromium(site, gateway_url, token, s: Seeded) -> None:
    with chromium(1280, 900) as (b,):
        _sign_in(b, site, gateway_url, token)
        _pages(b, "chromium", 1280, site, s)
        stamp = _local(b, s.removed_time)
        _removed(b, "chromium", 1280, site, s, stamp)
        b.page.set_viewport_size({"width": 320, "height": 720})
        _removed(b, "chromium", 320, site, s, stamp)


def _webkit(site, gateway_url, token, s: Seeded) -> None:
    with webkit(320, 720) as b:
        _sign_in(b, site, gateway_url, token)
        _pages(b, "webkit", 320, site, s)
        _removed(b, "webkit", 320, site, s, _local(b, s.removed_time))


@pytest.mark.parametrize("engine", ["chromium", "webkit"])
async def test_queue_pages_stay_newest_first_and_a_removed_turn_is_said(stack, tmp_path, engine):
    await in_console(stack, tmp_path / "envoy", _chromium if engine == "chromium" else _webkit, await _seed(stack))
