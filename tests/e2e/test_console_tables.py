"""The console's lists as tables and the Agents list (issue 28) in two real engines (Chromium through
Playwright, WebKitGTK through WebKitWebDriver) at 1280 px and 320 px, against data this test made over
gRPC, each screen compared with the API's own answer:
- Agents: latest activity first, each agent's last turn and counts (turns, reports, ratings), a fork
  nested under its parent and collapsible, search by name (on the server);
- the dashboard's feeds as tables: the negative signals paged with the API's page tokens (the rows of
  both pages are the API's items), the recent feed's category filter applied by the server, the reports
  table, a row expanding to the whole report;
- `Feedback.trace_url` (the configured trace-view template) as "Open trace" on the Feedback table's row, in the review queue's item view,
  in its expanded report and in the dashboard's report, opening a new tab without an opener;
- chart values on hover: today's negative count in the trend's legend (issue 28 "tooltips with values").
Screenshots: test-artifacts/<engine>-<width>-tables-*.png.
"""
from __future__ import annotations

import asyncio
import json
import time

import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from tests.helpers import engines
from tests.helpers.grpcweb import CONSOLE_DIST, gateway, static_site
from tests.helpers.feedback import flag, rid, send
from tests.stack import start_stack

pytestmark = pytest.mark.browser
HEIGHT = 900
TEMPLATE = "https://jaeger.example/trace/{trace_id}?from=console"
NEG = pb.RATING_SENTIMENT_NEGATIVE
NEGATIVE_PAGE = 10  # the dashboard's negative-signals page size (dashboardFeed.ts)


def until(b, expression: str, want, timeout_s: float = 15.0):
    """Wait until the page's `expression` equals `want`; its last value otherwise (in the assertion)."""
    end = time.monotonic() + timeout_s
    while (got := b.js(expression)) != want:
        assert time.monotonic() < end, f"{expression}: {got!r}, expected {want!r}"
        time.sleep(0.05)
    return got


def texts(css: str) -> str:
    return f"[...document.querySelectorAll({json.dumps(css)})].map((e) => e.textContent.trim())"


def one(css: str) -> str:
    """The expression of the first element matching `css`."""
    return f"document.querySelector({json.dumps(css)})"


async def seed(stack) -> dict:
    chat, fb, md = stack.chat(), stack.feedback(), stack.md()

    async def instance(name: str) -> str:
        return (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name=name, agent="reference"), request_id=rid()), metadata=md)).name

    ops = await instance("Ops desk")
    docs = await instance("Docs helper")  # newer, but without a turn
    t0 = await send(stack, ops, "How many agents do you have in total?")
    t1 = await send(stack, ops, "List my subordinates, please.")
    report = await flag(stack, t1.reply.name, "The count is off by one.", surface=pb.SURFACE_CHAT,
                        sentiment=pb.SENTIMENT_BAD, category=pb.CATEGORY_BROKEN_RESPONSE)
    # Eleven negative signals: the dashboard's first page holds ten, the next the rest.
    for turn in (0, 1):
        await fb.PutRating(pb.PutRatingRequest(rating=pb.Rating(
            conversation=ops, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction", sentiment=NEG),
            update_mask={"paths": ["sentiment"]}, request_id=rid()), metadata=md)
    for aspect in ("accuracy", "tone", "helpfulness", "clarity", "safety", "speed", "format", "brevity"):
        await fb.PutRating(pb.PutRatingRequest(rating=pb.Rating(
            conversation=ops, turn_index=1, scope=pb.RATING_SCOPE_CONVERSATION, aspect=aspect, sentiment=NEG),
            update_mask={"paths": ["sentiment"]}, request_id=rid()), metadata=md)
    fork = (await chat.ForkConversation(chat_pb2.ForkConversationRequest(parent=ops, turn_index=0, request_id=rid()),
                                        metadata=md)).instance
    await send(stack, fork.name, "And in the other branch?")
    await send(stack, ops, "Thanks.")  # the parent's latest turn is now the newest activity
    neg = await fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(negative_only=True, page_size=NEGATIVE_PAGE), metadata=md)
    neg2 = await fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(
        negative_only=True, page_size=NEGATIVE_PAGE, page_token=neg.next_page_token), metadata=md)
    broken = await fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(category=pb.CATEGORY_BROKEN_RESPONSE), metadata=md)
    counts = {c.conversation: (c.reports, c.ratings) for c in (await fb.CountConversationFeedback(
        pb.CountConversationFeedbackRequest(conversations=[ops, docs, fork.name]), metadata=md)).counts}
    key = lambda it: it.feedback.name if it.HasField("feedback") else f"rating:{it.rating.name}"  # noqa: E731
    return {
        "ops": ops, "docs": docs, "fork": fork.name, "trace_url": TEMPLATE.replace("{trace_id}", t1.trace_id),
        "report": report.name, "t0": t0.trace_id, "counts": counts,
        "negative": [[key(i) for i in neg.items], [key(i) for i in neg2.items]], "more": bool(neg2.next_page_token),
        "broken": [key(i) for i in broken.items],
    }


def tables_flow(b, engine: str, width: int, site: str, gateway_url: str, token: str, want: dict) -> None:
    name = f"{engine}-{width}"
    b.goto(f"{site}/?gateway={gateway_url}#/signin")
    b.fill("#token", token)
    b.click("button[type=submit]")
    b.wait("h1", "Agents")

    # Agents: latest activity first (the parent's last turn is the newest), its fork nested under it.
    b.wait(f"li.agent-item[data-name='{want['ops']}'] .agent-reports")
    top = "ul.agents:not(.agent-forks) > li.agent-item"
    names = f"[...document.querySelectorAll({json.dumps(top)})].map((e) => e.dataset.name)"
    until(b, names, [want["ops"], want["docs"]])
    ops = f"li.agent-item[data-name='{want['ops']}']"
    reports, ratings = want["counts"][want["ops"]]
    assert (reports, ratings) == (1, 10)
    assert b.js(texts(f"{ops} > .agent-meta .agent-counts > span")) == ["3 turns", "1 report", "10 ratings"]
    assert b.js(f"{one(ops + ' > .agent-meta .agent-activity time')} !== null")
    assert b.js(texts(f"li.agent-item[data-name='{want['docs']}'] .agent-activity"))[0].startswith("no turn yet")
    fork = f"{ops} > ul.agent-forks > li.agent-item[data-name='{want['fork']}']"
    b.wait(fork)
    assert b.js(texts(f"{fork} .agent-turns")) == ["2 turns"]  # the copied turn and its own
    b.shot(f"{name}-tables-agents")
    b.click(f"{ops} > .forks-toggle")
    until(b, f"{one(fork)}.offsetParent === null", True)
    assert b.js(f"{one(ops + ' > .forks-toggle')}.getAttribute('aria-expanded')") == "false"
    b.click(f"{ops} > .forks-toggle")
    until(b, f"{one(fork)}.offsetParent !== null", True)
    b.fill("#agent-search", "HELPER")
    b.click(".agent-find button[type=submit]")
    until(b, names, [want["docs"]])

    # The Feedback table: "Open trace" on the row and in the expanded report, a new tab, no opener.
    b.goto(f"{site}/#/feedback")
    row = f"table.fb-table tr.dt-row[data-key='{want['report']}']"
    b.wait(f"{row} a.trace-ui-link")
    link = b.js(f"(() => {{ const a = {one(row + ' a.trace-ui-link')}; return [a.href, a.target, a.rel, a.textContent]; }})()")
    assert link[0] == want["trace_url"] and link[1] == "_blank" and "noopener" in link[2].split() and link[3] == "Open trace"
    b.click(f"{row} .dt-expand")
    b.wait(f"tr.dt-detail[data-key='{want['report']}'] .feedback-row a.trace-ui-link")
    fb_detail = f"tr.dt-detail[data-key='{want['report']}']"
    assert b.js(f"{one(fb_detail + ' a.trace-ui-link')}.href") == want["trace_url"]
    b.shot(f"{name}-tables-feedback")
    # The review queue's view of the report: the same link beside the live trace.
    b.goto(f"{site}/#/queue?kind=reports")
    b.wait(f".queue-item[data-name='{want['report']}'] .qi-panel a.trace-ui-link")
    assert b.js(f"{one('.queue-item .qi-panel a.trace-ui-link')}.href") == want["trace_url"]

    # The dashboard. Today's values on hover: the trend's legend shows today's negative count.
    b.goto(f"{site}/#/stats")
    b.wait("figure[data-chart=trend] .u-over")
    today_negative = b.js("[...document.querySelectorAll('table.chart-data[data-chart=trend] tbody tr')].at(-1)"
                          ".querySelectorAll('td')[1].textContent")
    assert today_negative == str(len(want["negative"][0]) + len(want["negative"][1]) - 1)  # the report is not a rating
    b.hover("figure[data-chart=trend] .u-over", 1.0, 0.5)
    legend = "[...document.querySelectorAll('figure[data-chart=trend] .u-legend .u-series')]" \
             ".find((s) => s.textContent.includes('negative')).querySelector('.u-value').textContent"
    until(b, legend, today_negative)
    b.shot(f"{name}-tables-hover")

    # Negative signals: the API's first page, then its next page (the API's page token).
    neg = ".negative-feed tbody tr.dt-row"
    keys = f"[...document.querySelectorAll({json.dumps(neg)})].map((e) => e.dataset.key)"
    until(b, keys, want["negative"][0])
    b.click(".negative-feed-box .dt-next")
    until(b, keys, want["negative"][1])
    assert b.js("document.querySelector('.negative-feed-box .dt-next').disabled") is (not want["more"])
    b.click(".negative-feed-box .dt-prev")
    until(b, keys, want["negative"][0])
    # Sorting a column orders the page on screen: by time, oldest first, then newest first.
    b.click(".negative-feed th.col-time .sort")
    until(b, "document.querySelector('.negative-feed th.col-time').getAttribute('aria-sort')", "ascending")
    times = b.js(f"[...document.querySelectorAll({json.dumps(neg + ' time')})].map((t) => t.dateTime)")
    assert times == sorted(times)

    # The recent feed's category filter is the server's: the rows are the API's answer to it.
    recent = ".recent-feed tbody tr.dt-row"
    b.js("(() => { const s = document.querySelector('#feed-category'); s.value = String(" + str(pb.CATEGORY_BROKEN_RESPONSE)
         + "); s.dispatchEvent(new Event('change')); return true; })()")
    until(b, f"[...document.querySelectorAll({json.dumps(recent)})].map((e) => e.dataset.key)", want["broken"])

    # The reports table: one report; its row expands to the report, with the trace link.
    rep = f".reports-table tbody tr.dt-row[data-key='{want['report']}']"
    b.wait(rep)
    b.click(f"{rep} .dt-expand")
    detail = f".reports-table tr.dt-detail[data-key='{want['report']}']"
    b.wait(f"{detail} .feed-item.report")
    until(b, f"{one(detail + ' .feed-body')}.textContent.includes('The count is off by one.')", True)
    assert b.js(f"{one(detail + ' a.trace-ui-link')}.href") == want["trace_url"]
    assert b.js(f"{one(detail + ' a.trace-ui-link')}.rel").split().count("noopener") == 1
    # Nothing wider than the phone (the tables scroll inside their own box).
    assert b.js("document.documentElement.scrollWidth") <= width
    b.shot(f"{name}-tables-dashboard")


def _chromium(width: int, *args) -> None:
    with engines.chromium(width, HEIGHT) as (b,):
        tables_flow(b, "chromium", width, *args)


def _webkit(width: int, *args) -> None:
    with engines.webkit(width, HEIGHT) as b:
        tables_flow(b, "webkit", width, *args)


async def _run(database_url, tmp_path, engine, width: int) -> None:
    stack = await start_stack(database_url, tmp_path, feedback={"trace_url_template": TEMPLATE})
    try:
        want = await seed(stack)
        assert want["more"] is False and len(want["negative"][1]) >= 1
        with static_site(CONSOLE_DIST) as site:
            async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
                await asyncio.to_thread(engine, width, site, envoy.url, stack.token(), want)
    finally:
        await stack.stop()


@pytest.mark.parametrize("width", [1280, 320])
async def test_tables_agents_and_trace_links_in_chromium(database_url, tmp_path, width):
    await _run(database_url, tmp_path, _chromium, width)


@pytest.mark.parametrize("width", [1280, 320])
async def test_tables_agents_and_trace_links_in_webkit(database_url, tmp_path, width):
    await _run(database_url, tmp_path, _webkit, width)
