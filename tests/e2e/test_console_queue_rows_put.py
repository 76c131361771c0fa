"""The review queue at 320 px in real Chromium and WebKit: the list's rows stay where they first appeared
while the open item's view fills in. The open item is drawn after the queue loads (once its claim answers)
and then grows as its conversation, evidence and trace arrive; at phone width it came before the list
(`.queue-main { order: -1 }`), so every row moved down by thousands of pixels under a finger aiming at it
and a tap opened another item. The list now comes before the item (the side column's own order, as on
a desktop: bulk bar, rows, then the item), where nothing above it loads later. Each row's page position
(scroll-independent) is read every 10 ms from before the queue is opened until the first item is drawn
whole, and on until a tapped row's item is drawn whole too.

A tap on a row brings its item to the top of the screen (the list is part of the page on a phone: the
item would otherwise open out of sight below it), and the item's "List" control brings the open row
back into view. Screenshots: test-artifacts/<engine>-320-queue-rows-put*.png."""
from __future__ import annotations

import time

import pytest

from tests.helpers.console import create_feedback_request, make_turn
from tests.helpers.engines import chromium, webkit
from tests.helpers.grpcweb import in_console

pytestmark = pytest.mark.browser
WIDTH, HEIGHT = 320, 720

# Installed on a page of the same document before the queue is opened (a hash change keeps it running).
# Per row (by its item's name): the page positions it was seen at, in order, one entry per change.
WATCH_JS = r"""(() => {
  window.__rowTops = {};
  window.__rowLooks = 0;
  const look = () => {
    window.__rowLooks++;
    for (const r of document.querySelectorAll('.queue-row')) {
      const top = Math.round(r.getBoundingClientRect().top + scrollY);
      const seen = (window.__rowTops[r.dataset.name] ??= []);
      if (seen[seen.length - 1] !== top) seen.push(top);
    }
  };
  window.__rowWatch = setInterval(look, 10);
  return 1;
})()"""
CURRENT = "document.querySelector('.queue-item') && document.querySelector('.queue-item').dataset.name"
IN_VIEW = """((el) => { if (!el) return null; const r = el.getBoundingClientRect();
  return r.top >= 0 && r.top < innerHeight && r.bottom <= innerHeight; })"""


def _until(b, expression: str, want, what: str, tries: int = 100) -> None:
    got = None
    for _ in range(tries):
        got = b.js(expression)
        if got == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: {got!r}, want {want!r}")


def _drawn_whole(b, name: str, engine: str) -> None:
    _until(b, CURRENT, name, f"{engine}: the open item")
    for part in (".qi-conv .qi-msg.reported", ".qi-trace .wf-span"):
        b.wait(f".queue-item[data-name='{name}'] {part}")
    b.wait(f".queue-item[data-name='{name}'] .qi-judgements", "No judgements on this turn.")
    time.sleep(0.3)  # a few more looks after the last part arrived


def _moved(tops: dict[str, list[int]]) -> dict[str, list[int]]:
    """The rows seen at more than one place, in list order (by where each first appeared)."""
    return {name: seen for name, seen in sorted(tops.items(), key=lambda kv: kv[1][0]) if len(seen) != 1}


def flow(b, engine: str, site: str, gateway_url: str, token: str, reports: list[str]) -> None:
    b.goto(f"{site}/?gateway={gateway_url}#/signin")
    b.fill("#token", token)
    b.click("button[type=submit]")
    b.wait("h1", "Agents")
    b.js(WATCH_JS)
    b.js("(() => { location.hash = '#/queue'; return 1; })()")
    newest, oldest = reports[-1], reports[0]
    _drawn_whole(b, newest, engine)  # the queue opens on the newest report
    tops = b.js("window.__rowTops")
    assert b.js("window.__rowLooks") > 20, f"{engine}: too few looks"
    assert sorted(tops) == sorted(reports), f"{engine}: rows seen {sorted(tops)}, want {sorted(reports)}"
    assert not _moved(tops), f"{engine}: rows moved while the open item filled in (page y, in order): {_moved(tops)}"
    # The list comes before the item: the last row ends above the item's column.
    rows_end, item_top = b.js("[Math.max(...[...document.querySelectorAll('.queue-row')].map((r) => r.getBoundingClientRect().bottom)),"
                              " document.querySelector('.queue-main').getBoundingClientRect().top]")
    assert rows_end <= item_top, f"{engine}: the rows (ending at {rows_end}) are not above the item (at {item_top})"

    # A tap on the oldest row opens its item at the top of the screen; the rows stay put meanwhile.
    b.click(f".queue-row[data-name='{oldest}'] .q-open")
    _drawn_whole(b, oldest, engine)
    tops = b.js("(() => { clearInterval(window.__rowWatch); return window.__rowTops; })()")
    assert not _moved(tops), f"{engine}: rows moved while a tapped item filled in (page y, in order): {_moved(tops)}"
    _until(b, f"{IN_VIEW}(document.querySelector('.queue-main .queue-actions'))", True, f"{engine}: the tapped item's toolbar in view")
    b.shot(f"{engine}-{WIDTH}-queue-rows-put-item")
    # Its "List" control brings the open row back into view.
    b.click(".queue-actions .q-to-list")
    _until(b, f"{IN_VIEW}(document.querySelector('.queue-row.current'))", True, f"{engine}: the open row in view after List")
    assert b.js("document.querySelector('.queue-row.current').dataset.name") == oldest
    assert b.js("document.activeElement && document.activeElement.closest('.queue-row.current') !== null") is True, \
        f"{engine}: focus is not on the open row after List"
    b.shot(f"{engine}-{WIDTH}-queue-rows-put")


def _chromium(site, gateway_url, token, reports) -> None:
    with chromium(WIDTH, HEIGHT) as (b,):
        flow(b, "chromium", site, gateway_url, token, reports)


def _webkit(site, gateway_url, token, reports) -> None:
    with webkit(WIDTH, HEIGHT) as b:
        flow(b, "webkit", site, gateway_url, token, reports)


@pytest.mark.parametrize("engine", ["chromium", "webkit"])
async def test_the_rows_stay_put_at_320px_while_the_open_item_fills_in(stack, tmp_path, engine):
    _, turn = await make_turn(stack)
    reports = []  # oldest first; the queue lists them newest first
    for body in ("wrong total", "a name is missing", "it listed a retired agent"):
        reports.append((await stack.feedback().CreateFeedback(create_feedback_request(turn.reply.name, body), metadata=stack.md())).name)
    await stack.aflush_spans()
    await in_console(stack, tmp_path / "envoy", _chromium if engine == "chromium" else _webkit, reports)
