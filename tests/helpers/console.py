"""Helpers of the console and gRPC-web tests (tests/e2e): Debian's chromium through Playwright (a page
that fails the test on an uncaught page error, a screenshot into test-artifacts/, signing in with a
token), and a turn to report on plus a report request, made over native gRPC."""
from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from playwright.async_api import Page, async_playwright, expect

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from tests.helpers.grpcweb import ARTIFACTS
from tests.stack import Stack

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
QUESTION = "How many agents do you have in total? Give me their names."
TOOL = "list_subordinates"  # the reference agent's tool for this question (services/chat/agent/intents.py)


@contextlib.asynccontextmanager
async def browser_page(width: int, height: int) -> AsyncIterator[Page]:
    """A chromium page of `width` x `height` CSS px; AssertionError at exit if the page threw uncaught."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            ctx = await browser.new_context(viewport={"width": width, "height": height})
            page = await ctx.new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page
            assert not errors, f"uncaught errors in the page: {errors}"
        finally:
            await browser.close()


async def shot(page: Page, name: str) -> None:
    """A full-page screenshot as test-artifacts/<name>.png."""
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def sign_in(page: Page, site: str, gateway_url: str, token: str) -> None:
    """Signs in on the console at `site` talking to `gateway_url`; returns once the Agents page shows."""
    await page.goto(f"{site}/?gateway={gateway_url}#/signin")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await expect(page.get_by_role("heading", name="Agents")).to_be_visible()


async def make_turn(stack: Stack, content: str = QUESTION,
                    sub: str = "alice") -> tuple[str, chat_pb2.SendMessageResponse]:
    """An instance of the reference agent with one turn, made over native gRPC."""
    chat = stack.chat()
    inst = await chat.CreateInstance(
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="Ops", agent="reference"),
                                       request_id=str(uuid.uuid4())), metadata=stack.md(sub))
    turn = await chat.SendMessage(
        chat_pb2.SendMessageRequest(instance=inst.name, content=content, channel=chat_pb2.CHANNEL_TEXT,
                                    request_id=str(uuid.uuid4())), metadata=stack.md(sub))
    return inst.name, turn


def create_feedback_request(message: str, body: str) -> feedback_pb2.CreateFeedbackRequest:
    """A bad-sentiment chat report of `message` (a message resource name) saying `body`, with a new request_id."""
    return feedback_pb2.CreateFeedbackRequest(
        feedback=feedback_pb2.Feedback(message=message, body=body, surface=feedback_pb2.SURFACE_CHAT,
                                       sentiment=feedback_pb2.SENTIMENT_BAD),
        request_id=str(uuid.uuid4()))
