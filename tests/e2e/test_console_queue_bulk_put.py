"""The review queue at 320 px in real Chromium and WebKit: the bulk bar stays where it first appeared while
the open item's view fills in. At phone width the open item came first (`.queue-main { order: -1 }`),
and its view is drawn after the queue loads and then grows as its conversation, evidence and trace
arrive: everything below it moved, the bulk bar too, so a tap aimed at "Mark selected triaged" could
land on whatever moved under the finger (the list's rows too: test_console_queue_rows_put.py). Measured every 10 ms, in page coordinates (scroll-independent),
from before the queue is opened until the item is drawn whole."""
from __future__ import annotations

import time

import pytest

from tests.helpers.console import create_feedback_request, make_turn
from tests.helpers.engines import chromium, webkit
from tests.helpers.grpcweb import in_console

pytestmark = pytest.mark.browser
WIDTH, HEIGHT = 320, 720

# Installed on a page of the same document before the queue is opened (a hash change keeps it running).
WATCH_JS = r"""(() => {
  window.__bulkTops = [];
  const look = () => { const b = document.querySelector('.queue-bulk');
    if (b) window.__bulkTops.push(Math.round(b.getBoundingClientRect().top + scrollY)); };
  window.__bulkWatch = setInterval(look, 10);
  return 1;
})()"""
DRAWN = ".queue-item .qi-trace .wf-span"


def flow(b, engine: str, site: str, gateway_url: str, token: str) -> None:
    b.goto(f"{site}/?gateway={gateway_url}#/signin")
    b.fill("#token", token)
    b.click("button[type=submit]")
    b.wait("h1", "Agents")
    b.js(WATCH_JS)
    b.js("(() => { location.hash = '#/queue'; return 1; })()")
    b.wait(".queue-item .qi-conv .qi-msg.reported")
    b.wait(DRAWN)
    time.sleep(0.3)  # a few more looks after the last part arrived
    tops = b.js("(() => { clearInterval(window.__bulkWatch); return window.__bulkTops; })()")
    b.shot(f"{engine}-{WIDTH}-queue-bulk-put")
    assert tops, f"{engine}: the bulk bar never appeared"
    assert sorted(set(tops)) == [tops[0]], f"{engine}: the bulk bar moved while the item filled in: {sorted(set(tops))}"
    box = b.js("document.querySelector('.queue-bulk').getBoundingClientRect().toJSON()")
    assert box["top"] < HEIGHT, f"{engine}: the bulk bar is off the first screen: {box}"


def _chromium(site, gateway_url, token) -> None:
    with chromium(WIDTH, HEIGHT) as (b,):
        flow(b, "chromium", site, gateway_url, token)


def _webkit(site, gateway_url, token) -> None:
    with webkit(WIDTH, HEIGHT) as b:
        flow(b, "webkit", site, gateway_url, token)


@pytest.mark.parametrize("engine", ["chromium", "webkit"])
async def test_the_bulk_bar_stays_put_at_320px_while_the_open_item_fills_in(stack, tmp_path, engine):
    _, turn = await make_turn(stack)
    await stack.feedback().CreateFeedback(create_feedback_request(turn.reply.name, "wrong total"), metadata=stack.md())
    await stack.aflush_spans()
    await in_console(stack, tmp_path / "envoy", _chromium if engine == "chromium" else _webkit)
