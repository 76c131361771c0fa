"""The console's first-load budget (issue 28: keep it light), measured in a real browser: what the first
visit of a signed-in page fetches — the HTML, its script and its style, as the browser received them
(Resource Timing `decodedBodySize`, uncompressed: the test server sends no compression) — stays within
FIRST_LOAD_BUDGET_BYTES, and the chart library (uPlot) is not among them: only the Statistics page
loads it, on first chart. The budget is stated in console/README.md ("First-load budget").
"""
from __future__ import annotations

import pytest
from playwright.async_api import expect

from tests.helpers.grpcweb import CONSOLE_DIST, gateway, static_site
from tests.helpers.console import browser_page, make_turn, sign_in

pytestmark = pytest.mark.browser

# 300 kB uncompressed (≈ 90 kB gzip): the first load measured 263 kB on 2026-12-01 (with issue 28's queue,
# tables and names and issue 23's workspace panels), so a framework or a component library would not fit unnoticed.
FIRST_LOAD_BUDGET_BYTES = 300_000

RESOURCES = """() => performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
  .filter((e) => !e.name.includes(':8080') && !/\\/(agentfeedback|grpc)\\./.test(e.name))
  .map((e) => ({name: e.name, bytes: e.decodedBodySize}))"""


async def test_first_load_fits_the_budget_and_leaves_the_charts_out(stack, tmp_path):
    inst, _ = await make_turn(stack)
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1280, 800) as page:
                await sign_in(page, site, envoy.url, stack.token())
                # A first visit of a signed-in page (the session stays in sessionStorage).
                await page.goto(f"{site}/#/agents/{inst.split('/')[-1]}/chat")
                await page.reload()
                await expect(page.locator("article.msg.assistant")).to_be_visible()
                static = [r for r in await page.evaluate(RESOURCES) if r["name"].startswith(site)]
                total = sum(r["bytes"] for r in static)
                assert any(r["name"].endswith(".js") for r in static) and any(r["name"].endswith(".css") for r in static)
                assert total <= FIRST_LOAD_BUDGET_BYTES, f"first load {total} bytes > {FIRST_LOAD_BUDGET_BYTES}: {static}"
                assert not [r for r in static if "uPlot" in r["name"]], static
                print(f"first load: {total} bytes in {len(static)} files")
                # The dashboard then fetches the chart chunk by itself.
                await page.goto(f"{site}/#/stats")
                await expect(page.locator("figure[data-chart=trend] canvas")).to_be_visible()
                assert [r for r in await page.evaluate(RESOURCES) if "uPlot" in r["name"]]
