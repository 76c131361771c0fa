"""The owner's feedback rows in a real browser (Debian chromium) against the real stack through Envoy:
what a stored report holds is shown — voice provenance, the turn's frozen tool calls (for an owner
without `traces:read`), a long quote clamped with an explicit expand — and the owner can delete a report
(confirmed, hard delete) and file it (a tracker failure shows its reason and stays retryable).

The issue tracker is a stand-in for GitHub's REST API (a local aiohttp server answering POST
/repos/o/r/issues), since GitHub cannot be reached here: first 503, then 201 with an html_url.
"""
from __future__ import annotations

import asyncio
import contextlib
import uuid

import grpc
import pytest
from aiohttp import web
from playwright.async_api import expect

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.auth import (SCOPE_CHAT, SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_TRIAGE, SCOPE_FEEDBACK_WRITE)
from tests.helpers.grpcweb import CONSOLE_DIST, gateway, static_site
from tests.helpers.console import QUESTION, TOOL, browser_page, shot, sign_in
from tests.stack import start_stack

pytestmark = pytest.mark.browser

OWNER_SCOPES = (SCOPE_CHAT, SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE, SCOPE_FEEDBACK_TRIAGE)  # no traces:read
HEARD = "how many ages does Kevin total give me the next"
AUDIO_KEY = "audio/alice/2026-12-01/utt-0042.opus"


@contextlib.asynccontextmanager
async def github_stand_in():
    """POST /repos/o/r/issues: 503 the first time, then 201 with an html_url per call."""
    calls: list[dict] = []

    async def issues(request: web.Request) -> web.Response:
        calls.append(await request.json())
        if len(calls) == 1:
            return web.json_response({"message": "unavailable"}, status=503)
        return web.json_response({"html_url": f"https://github.example/o/r/issues/{len(calls)}"}, status=201)

    app = web.Application()
    app.router.add_post("/repos/o/r/issues", issues)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", calls
    finally:
        await runner.cleanup()


async def wait_captured(stack, name: str, sub: str = "alice") -> pb.Feedback:
    for _ in range(200):
        await stack.aflush_spans()
        fb = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=name), metadata=stack.md(sub))
        if fb.trace_snapshot.state == pb.TRACE_SNAPSHOT_STATE_CAPTURED:
            return fb
        await asyncio.sleep(0.1)
    raise AssertionError(f"trace snapshot of {name} never captured")


async def test_owner_rows_show_voice_tool_calls_clamped_quote_and_delete_and_file(database_url, tmp_path):
    async with github_stand_in() as (tracker_url, tracker_calls):
        stack = await start_stack(database_url, tmp_path, feedback={
            "tracker": "github", "tracker_github_api": tracker_url, "tracker_github_repo": "o/r"})
        try:
            await _rows_flow(stack, tmp_path, tracker_calls)
        finally:
            await stack.stop()


async def _rows_flow(stack, tmp_path, tracker_calls) -> None:
    chat = stack.chat()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Ops desk", agent="reference"), request_id=str(uuid.uuid4())),
        metadata=stack.md())
    voice = await chat.SendMessage(chat_pb2.SendMessageRequest(
        instance=inst.name, content=QUESTION, channel=chat_pb2.CHANNEL_VOICE, audio_key=AUDIO_KEY, dictation=HEARD,
        request_id=str(uuid.uuid4())), metadata=stack.md())
    long_text = " ".join(f"word{i}" for i in range(330))[:1990]  # ~2,000 characters of one user message
    long_turn = await chat.SendMessage(chat_pb2.SendMessageRequest(
        instance=inst.name, content=long_text, channel=chat_pb2.CHANNEL_TEXT, request_id=str(uuid.uuid4())),
        metadata=stack.md())

    def report(message: str, body: str) -> pb.CreateFeedbackRequest:
        return pb.CreateFeedbackRequest(feedback=pb.Feedback(message=message, body=body, surface=pb.SURFACE_CHAT,
                                                             sentiment=pb.SENTIMENT_BAD), request_id=str(uuid.uuid4()))

    spoken = await stack.feedback().CreateFeedback(report(voice.reply.name, "It miscounted my agents."),
                                                   metadata=stack.md())
    long_fb = await stack.feedback().CreateFeedback(report(long_turn.user_message.name, "My long message."),
                                                    metadata=stack.md())
    doomed = await stack.feedback().CreateFeedback(report(voice.reply.name, "Sent by mistake."), metadata=stack.md())
    # A message opening with a right-to-left override (U+202E, never closed: Trojan Source) and long
    # enough that the quote is clipped, so the console's own " […]" marker follows it on the line.
    rlo_text = "\u202e" + " ".join(f"mot{i}" for i in range(450))[:2100]
    rlo_turn = await chat.SendMessage(chat_pb2.SendMessageRequest(
        instance=inst.name, content=rlo_text, channel=chat_pb2.CHANNEL_TEXT, request_id=str(uuid.uuid4())),
        metadata=stack.md())
    await stack.feedback().CreateFeedback(report(rlo_turn.user_message.name, "\u202eOverridden words."),
                                          metadata=stack.md())
    await wait_captured(stack, spoken.name)

    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1024, 900) as page:
                await sign_in(page, site, envoy.url, stack.token("alice", OWNER_SCOPES))
                await page.goto(f"{site}/#/feedback?expand=all")

                row = page.locator(".feedback-row", has_text="It miscounted my agents.")
                await expect(row.locator(".voice-heard")).to_have_text(HEARD)
                await expect(row.locator(".voice-sent")).to_have_text(QUESTION)
                await expect(row.locator(".voice-audio")).to_have_text(AUDIO_KEY)
                await expect(row.locator(".voice-note")).to_contain_text("lives only as long as the transcript")
                # The frozen tool calls, from the report itself: this token cannot read traces.
                await expect(row.locator(".frozen-tools summary")).to_contain_text(f"1 tool call: {TOOL}")
                await row.locator(".frozen-tools summary").click()
                await expect(row.locator(f".tool-call-frozen[data-tool={TOOL}]")).to_be_visible()
                await expect(row.locator(f".tool-call-frozen[data-tool={TOOL}] .tc-name")).to_have_text(TOOL)
                await expect(row.locator(f".tool-call-frozen[data-tool={TOOL}] .tc-result")).to_contain_text("result")

                # A 2,000-character quote takes a few lines until expanded.
                long_row = page.locator(".feedback-row", has_text="My long message.")
                quote = long_row.locator(".fb-quote-text .clamp-body")
                line = await quote.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
                clamped_h = (await quote.bounding_box())["height"]
                assert clamped_h <= 4 * line + 2, (clamped_h, line)
                toggle = long_row.locator(".fb-quote-text .clamp-toggle")
                await expect(toggle).to_have_text("Show all")
                await toggle.click()
                await expect(toggle).to_have_attribute("aria-expanded", "true")
                assert (await quote.bounding_box())["height"] > 3 * clamped_h
                await expect(quote).to_contain_text(long_text[-40:])
                # The client's bidi override reorders its own text only: the console's " […]" marker
                # stays after the quote, at the right of its line, not pulled to the line's left edge.
                rlo_row = page.locator(".feedback-row", has=page.locator(".fb-words", has_text="Overridden words."))
                await rlo_row.locator(".fb-quote-text .clamp-toggle").click()
                rlo_quote = rlo_row.locator(".fb-quote-text .clamp-body")
                marker, text_right = await rlo_quote.locator("span.muted", has_text="[…]").evaluate("""m => {
                    const r = document.createRange(); r.selectNodeContents(m.previousSibling);
                    const mk = m.getBoundingClientRect();
                    const line = [...r.getClientRects()].filter(x => Math.abs(x.top - mk.top) < mk.height / 2);
                    return [mk.left, line.length ? Math.max(...line.map(x => x.right)) : null]; }""")
                assert text_right is not None and marker >= text_right - 1, (marker, text_right)
                short_toggle = row.locator(".fb-words-box .clamp-toggle")
                await expect(short_toggle).to_be_hidden()  # nothing cut, nothing to expand
                await shot(page, "console-feedback-rows")

                # Delete: asks first, then removes the report for good.
                doomed_row = page.locator(".feedback-row", has_text="Sent by mistake.")
                await doomed_row.locator(".act-delete-report").click()
                await expect(doomed_row.locator(".confirm-text")).to_contain_text("cannot be undone")
                got = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=doomed.name), metadata=stack.md())
                assert got.name == doomed.name  # nothing deleted before the confirmation
                await doomed_row.locator(".confirm-delete-report").click()
                await expect(page.locator(".feedback-row .deleted")).to_have_count(1)
                with pytest.raises(grpc.aio.AioRpcError) as gone:
                    await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=doomed.name), metadata=stack.md())
                assert gone.value.code() == grpc.StatusCode.NOT_FOUND

                # File issue: the tracker is down the first time (reason shown, retryable), then files.
                file_btn = row.locator(".act-file")
                await file_btn.click()
                await expect(row.locator(".file-msg")).to_contain_text("TRACKER_UNAVAILABLE")
                await expect(row.locator(".file-msg")).to_contain_text("UNAVAILABLE")
                await expect(file_btn).to_have_text("Try filing again")
                await expect(file_btn).to_be_enabled()
                await file_btn.click()
                filed_row = page.locator(".feedback-row", has_text="It miscounted my agents.")
                await expect(filed_row.locator(".fb-issue a")).to_have_text("https://github.example/o/r/issues/2")
                await expect(filed_row.locator(".badge.status-filed")).to_be_visible()
                await expect(filed_row.locator(".act-file")).to_have_count(0)
                # Its history (the audit trail, the owner's own records): who filed it and what changed.
                await filed_row.locator(".fb-history summary").click()
                record = filed_row.locator(".audit-record[data-action=FILE_FEEDBACK]")
                await expect(record).to_contain_text("alice")
                await expect(record).to_contain_text("filed")
                await expect(record).to_contain_text("https://github.example/o/r/issues/2")
                await shot(page, "console-feedback-filed")
    stored = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=spoken.name), metadata=stack.md())
    assert (stored.status, stored.issue_url) == (pb.STATUS_FILED, "https://github.example/o/r/issues/2")
    assert len(tracker_calls) == 2
    assert long_fb.name != stored.name
