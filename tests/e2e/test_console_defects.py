"""The Suspected defects page in a real browser against the real stack: the turns the platform caught
(here a tool result the tool layer cut, span event `chat.truncated`) listed apart from what people said,
per owner, and across owners for an operator; "Report it" turns one into a report anchored to that turn.
"""
from __future__ import annotations

import uuid

import pytest
from playwright.async_api import expect

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.auth import ALL_SCOPES, SCOPE_CHAT, SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE
from tests.helpers.grpcweb import CONSOLE_DIST, gateway, static_site
from tests.helpers.console import QUESTION, browser_page, shot, sign_in

pytestmark = pytest.mark.browser
OWNER = (SCOPE_CHAT, SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE)


async def turn(stack, sub: str, content: str) -> chat_pb2.SendMessageResponse:
    chat = stack.chat()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name=f"{sub}'s desk", agent="reference"), request_id=str(uuid.uuid4())),
        metadata=stack.md(sub))
    return await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content=content,
                                                              request_id=str(uuid.uuid4())), metadata=stack.md(sub))


async def test_suspected_defects_listed_apart_per_owner_and_for_an_operator(stack, tmp_path):
    mine = await turn(stack, "alice", QUESTION)  # the listing is cut at 4096 bytes: chat.truncated
    await turn(stack, "alice", "what is the weather?")  # nothing caught
    await turn(stack, "bob", QUESTION)
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1024, 800) as page:
                await sign_in(page, site, envoy.url, stack.token("alice", OWNER))
                await page.locator("header.top").get_by_role("link", name="Suspected defects").click()
                rows = page.locator(".defect-row")
                await expect(rows).to_have_count(1)
                await expect(rows.first.locator(".defect-event")).to_have_text("chat.truncated")
                await expect(rows.first.locator(".defect-what")).to_contain_text("a tool result was cut")
                await expect(rows.first.locator(".defect-user")).to_contain_text(QUESTION)
                assert await rows.first.get_attribute("data-trace") == mine.trace_id
                await expect(page.locator("#defects-all")).to_have_count(0)  # not an operator
                # Apart from what people said: the Feedback page has nothing.
                await page.locator("header.top").get_by_role("link", name="Feedback").click()
                await expect(page.locator(".fb-table .empty")).to_have_text("Nothing flagged yet.")
                await shot(page, "console-defects-owner")
                # One action turns it into a report anchored to that turn (the server writes the words).
                await page.locator("header.top").get_by_role("link", name="Suspected defects").click()
                await rows.first.locator(".act-report-defect").click()
                await expect(rows.first.locator(".defect-msg")).to_contain_text("Reported.")
                await rows.first.locator(".defect-msg a").click()
                reported = page.locator(".feedback-row.focused")
                await expect(reported.locator(".badge", has_text="caught by the platform")).to_be_visible()
                listed = await stack.feedback().ListFeedback(pb.ListFeedbackRequest(), metadata=stack.md("alice"))
                assert [(f.author, f.snapshot.trace_id) for f in listed.feedback] == [(pb.AUTHOR_PLATFORM, mine.trace_id)]
                # After a reload the page still knows it is reported: its report, no second "Report it".
                await page.goto(f"{site}/#/defects")
                await page.reload()
                await expect(rows).to_have_count(1)
                await expect(rows.first.locator(".defect-msg")).to_contain_text("Reported.")
                await expect(rows.first.locator(".act-report-defect")).to_have_count(0)

                await sign_in(page, site, envoy.url, stack.token("ops", ALL_SCOPES))
                await page.goto(f"{site}/#/defects")
                await page.locator("#defects-all").check()
                await expect(rows).to_have_count(2)
                await expect(page.locator(".defect-row", has_text="bob")).to_have_count(1)
