"""Console pages beyond the main flag flow, in a real browser against the real stack through Envoy:
honest trace states, a cleared chat, triage with the etag, the status filter, like/dislike, and the
Statistics page (feedback:admin only).
"""
from __future__ import annotations

import uuid

import pytest
from playwright.async_api import expect

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from services.common.auth import SCOPE_CHAT, SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE, SCOPE_TRACES_READ
from tests.helpers.grpcweb import CONSOLE_DIST, gateway, static_site
from tests.helpers.console import browser_page, create_feedback_request, make_turn, shot, sign_in

pytestmark = pytest.mark.browser


async def test_console_trace_not_recorded_and_cleared_chat(stack, tmp_path):
    """A turn whose chat was cleared: the row keeps the words and the quote, and says the conversation is
    unavailable; a trace id the collector never saw says "not recorded"."""
    inst, turn = await make_turn(stack)
    await stack.feedback().CreateFeedback(create_feedback_request(turn.reply.name, "Cleared later."), metadata=stack.md())
    await stack.chat().ClearMessages(chat_pb2.ClearMessagesRequest(parent=inst), metadata=stack.md())
    never = uuid.uuid4().hex
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1024, 800) as page:
                await sign_in(page, site, envoy.url, stack.token())
                await page.goto(f"{site}/#/feedback?expand=all")
                row = page.locator(".feedback-row", has_text="Cleared later.")
                await expect(row.locator(".conv-link")).to_contain_text("conversation unavailable")
                await expect(row.locator("a.open-conversation")).to_have_count(0)
                await expect(row.locator(".fb-quote")).to_contain_text(turn.reply.content[:60])
                await shot(page, "console-cleared-chat")
                await page.goto(f"{site}/#/agents/{inst.split('/')[-1]}/trace?trace={never}")
                await expect(page.locator(".trace-missing")).to_have_text(
                    "Trace not recorded: the collector has no span of this turn.")


async def test_console_triage_and_status_filter(stack, tmp_path):
    _, turn = await make_turn(stack)
    await stack.feedback().CreateFeedback(create_feedback_request(turn.reply.name, "Needs a ticket."), metadata=stack.md())
    await stack.feedback().CreateFeedback(create_feedback_request(turn.user_message.name, "Stays open."), metadata=stack.md())
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1024, 800) as page:
                await sign_in(page, site, envoy.url, stack.token())
                await page.goto(f"{site}/#/feedback?expand=all")
                row = page.locator(".feedback-row", has_text="Needs a ticket.")
                await row.locator("select.triage-status").select_option(label="triaged")
                await row.locator("input.triage-issue").fill("https://tracker.example/issues/42")
                await row.locator("button", has_text="Save").click()
                row = page.locator(".feedback-row", has_text="Needs a ticket.")
                await expect(row.locator(".badge.status-triaged")).to_be_visible()
                await expect(row.get_by_role("link", name="https://tracker.example/issues/42")).to_be_visible()

                await page.select_option("#status-filter", label="triaged")
                await expect(page.locator(".feedback-row")).to_have_count(1)
                await expect(page.locator(".feedback-row .fb-words")).to_have_text("Needs a ticket.")
                await page.select_option("#status-filter", label="open")
                await expect(page.locator(".feedback-row")).to_have_count(1)
                await expect(page.locator(".feedback-row .fb-words")).to_have_text("Stays open.")
                await shot(page, "console-triage-filter")
    rows = await stack.feedback().ListFeedback(feedback_pb2.ListFeedbackRequest(status=feedback_pb2.STATUS_TRIAGED),
                                               metadata=stack.md())
    assert [(f.body, f.issue_url) for f in rows.feedback] == [("Needs a ticket.", "https://tracker.example/issues/42")]


async def test_console_stale_etag_shows_current_row(stack, tmp_path):
    """Someone else triages the row while the page is open: Save gets ABORTED and shows the current row."""
    _, turn = await make_turn(stack)
    fb = await stack.feedback().CreateFeedback(create_feedback_request(turn.reply.name, "Raced."), metadata=stack.md())
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1024, 800) as page:
                await sign_in(page, site, envoy.url, stack.token())
                await page.goto(f"{site}/#/feedback?expand=all")
                row = page.locator(".feedback-row", has_text="Raced.")
                await expect(row).to_be_visible()
                await stack.feedback().UpdateFeedback(feedback_pb2.UpdateFeedbackRequest(
                    feedback=feedback_pb2.Feedback(name=fb.name, status=feedback_pb2.STATUS_DISMISSED),
                    update_mask={"paths": ["status"]}), metadata=stack.md())
                await row.locator("select.triage-status").select_option(label="triaged")
                await row.locator("button", has_text="Save").click()
                row = page.locator(".feedback-row", has_text="Raced.")
                await expect(row.locator(".triage-msg")).to_contain_text("changed this report meanwhile")
                await expect(row.locator(".badge.status-dismissed")).to_be_visible()
    got = await stack.feedback().GetFeedback(feedback_pb2.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert got.status == feedback_pb2.STATUS_DISMISSED


async def test_console_reaction_and_statistics(stack, tmp_path):
    """Dislike a reply (PutRating `reaction`, MESSAGE scope): the glyph stays lit after a reload and the
    Statistics page counts it; a token without feedback:admin has no Statistics page."""
    inst, _ = await make_turn(stack)
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1024, 900) as page:
                await sign_in(page, site, envoy.url, stack.token())
                await page.goto(f"{site}/#/agents/{inst.split('/')[-1]}/chat")
                reply = page.locator("article.msg.assistant").first
                await reply.locator(".act-dislike").click()
                # Saved at once; the reply section opens so a reason can follow.
                dialog = page.locator("dialog.fb-modal[open]")
                await expect(dialog.get_by_role("tab", name="This reply")).to_have_attribute("aria-selected", "true")
                await page.keyboard.press("Escape")
                await expect(dialog).to_have_count(0)
                await expect(page.locator("article.msg.assistant .act-dislike").first).to_have_attribute(
                    "aria-pressed", "true")
                await page.reload()
                await expect(page.locator("article.msg.assistant .act-dislike").first).to_have_attribute(
                    "aria-pressed", "true")
                await expect(page.locator("article.msg.assistant .act-like").first).to_have_attribute(
                    "aria-pressed", "false")
                await expect(page.locator("article.msg.assistant .glyph-pair").first).to_have_attribute("data-lit", "dislike")

                await page.locator("header.top").get_by_role("link", name="Statistics").click()
                await expect(page.locator("[data-stat=ratings] .stat-value")).to_have_text("1")
                await expect(page.locator("[data-stat=negative] .stat-value")).to_have_text("1")
                aspect = page.locator("table.aspects tbody tr[data-dimension='message/reaction']")
                await expect(aspect.locator("td").nth(4)).to_have_text("1")  # negative column
                days = page.locator("table.chart-data[data-chart=trend] tbody tr")
                await expect(days).to_have_count(30)  # one row per day of the default 30-day window
                assert (await days.last.locator("td").all_text_contents())[1] == "1"  # today's negative
                await expect(page.locator("figure[data-chart=trend] .chart-plot")).to_have_attribute("data-points", "30")
                # One active day of 30 is said to be sparse; hovering today shows its values (issue 28).
                trend = page.locator("figure[data-chart=trend]")
                await expect(trend.locator(".chart-sparse")).to_have_text("Activity on one day of 30: the rest are zeros.")
                over = trend.locator(".u-over")
                box = await over.bounding_box()
                await page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)
                legend = trend.locator(".u-legend .u-series", has_text="negative")
                await expect(legend.locator(".u-value")).to_have_text("1")
                await shot(page, "console-statistics")

                owner_only = stack.token("alice", (SCOPE_CHAT, SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE, SCOPE_TRACES_READ))
                await page.goto(f"{site}/#/signin")
                await page.fill("#token", owner_only)
                await page.click("button[type=submit]")
                await expect(page.get_by_role("heading", name="Agents")).to_be_visible()
                await expect(page.locator("header.top").get_by_role("link", name="Statistics")).to_have_count(0)
                await page.goto(f"{site}/#/stats")
                await expect(page.locator("main .error")).to_contain_text("PERMISSION_DENIED")
