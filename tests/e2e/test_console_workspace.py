"""The workspace panels and their questions in two real engines (Chromium through Playwright, WebKitGTK
through WebKitWebDriver) at 1280 px and 320 px (issue 23): the panels render beside the chat (below it on
a phone) as of the viewed turn; a "just updated" ping shows only on a component the latest turn changed
and the owner has not rated, and goes when it is rated and when the next turn arrives; the modal asks a
delta question only about a component that changed, shows two artifact cards for a turn that wrote two
and a text box for the emerging goal when the owner rejects the objective; the reply's glyph lights with
both halves coloured once the turn has any feedback, a component's rating included. Under
`prefers-reduced-motion` the ping does not pulse and its badge stays (Chromium's media emulation).
Screenshots: test-artifacts/<engine>-<width>-workspace*.png.

Both drivers are synchronous here and run in a worker thread, so the in-process stack keeps serving.
"""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from tests.helpers import engines
from tests.helpers.grpcweb import ARTIFACTS, CONSOLE_DIST, gateway, static_site
from tests.helpers.layout import assert_layout

pytestmark = pytest.mark.browser
HEIGHT = 900
TURN0 = "Write a README and a changelog for the parser. Always use British spelling. Keep it under a page."
TURN1 = "First outline the tests, then fix the tokenizer, and finally update the docs. Never use jargon."
TURN2 = "Please revise the README with the install steps."
GOAL = "A benchmark report, not docs"
GREEN, RED = "rgb(31, 138, 76)", "rgb(192, 57, 43)"  # style.css --good / --bad


def count(b, css: str) -> int:
    return b.js(f"document.querySelectorAll({css!r}).length")


def until(b, css: str, n: int) -> None:
    """Wait until exactly `n` elements match `css` (15 s)."""
    end = time.monotonic() + 15
    while count(b, css) != n:
        assert time.monotonic() < end, f"{css}: {count(b, css)} elements, expected {n}"
        time.sleep(0.05)


def workspace_flow(b, engine: str, width: int, site: str, gateway_url: str, token: str, agent_id: str) -> None:
    name = f"{engine}-{width}"
    panel = ".workspace .ws-panel"
    b.goto(f"{site}/?gateway={gateway_url}#/signin")
    b.fill("#token", token)
    b.click("button[type=submit]")
    b.wait("h1", "Agents")
    b.goto(f"{site}/#/agents/{agent_id}/chat")
    b.wait(f"{panel}[data-component=plan] .ws-plan li")
    # The four panels as of the latest turn (turn 2 of 2): its plan and preferences changed, nothing else.
    assert count(b, panel) == 4
    b.wait(".workspace .ws-turn", "As of turn 2")
    assert count(b, f"{panel}[data-component=artifacts] .ws-artifact") == 2
    assert count(b, ".workspace .ping") == 2
    assert count(b, f"{panel}[data-component=plan] .ping") == 1 and count(b, f"{panel}[data-component=preferences] .ping") == 1
    assert b.js("getComputedStyle(document.querySelector('.workspace .ping-dot')).animationName") == "ws-pulse"
    b.wait(".workspace .ping-cloud", "Just updated")
    side_by_side = b.js("(() => { const w = document.querySelector('.workspace').getBoundingClientRect();"
                        " const c = document.querySelector('.chat-main').getBoundingClientRect();"
                        " return w.left >= c.right - 1 ? 'beside' : w.top >= c.bottom - 1 ? 'below' : 'overlap'; })()")
    assert side_by_side == ("beside" if width > 760 else "below")
    assert_layout(b.measure(), f"{name} chat with the workspace", min_timestamps=2)
    b.shot(f"{name}-workspace")
    # Rating the plan (its like half): its ping goes, the other stays; the reply's glyph of that turn lights
    # with both halves coloured (the liked one pressed).
    b.click(f"{panel}[data-component=plan] .act-like")
    until(b, ".workspace .ping", 1)
    assert count(b, f"{panel}[data-component=preferences] .ping") == 1
    b.wait(f"{panel}[data-component=plan] .glyph-pair[data-lit=like]")
    reply = "article.msg.assistant[data-turn='1'] .glyph-pair"
    b.wait(f"{reply}[data-lit=feedback]")
    colours = b.js(f"(() => {{ const g = document.querySelector({reply!r}); return [getComputedStyle(g.querySelector('.act-like')).backgroundColor,"
                   " getComputedStyle(g.querySelector('.act-dislike')).backgroundColor]; })()")
    assert colours == [GREEN, RED]
    unlit = b.js("(() => { const g = document.querySelector(\"article.msg.assistant[data-turn='0'] .glyph-pair\");"
                 " return [g.dataset.lit, getComputedStyle(g.querySelector('.act-like')).backgroundColor]; })()")
    assert unlit[0] == "none" and unlit[1] != GREEN

    # An older turn: the workspace as it was then (no plan yet, two artifacts just written), no ping.
    b.click("article.msg.assistant[data-turn='0'] .msg-body")
    b.wait(".workspace .ws-turn", "earlier turn")
    assert count(b, f"{panel}[data-component=plan] .ws-plan li") == 0 and count(b, ".workspace .ping") == 0
    # Its modal: the objective changed in turn 0 (marked, its change question asked); the plan did not exist,
    # so nothing is asked about it and no delta question.
    b.click(f"{panel}[data-component=objective] .ws-title")
    b.wait("dialog.fb-modal[open] .modal-panel[data-section=workspace]")
    b.wait("dialog.fb-modal .ws-component[data-component=objective] .just-updated", "Just updated")
    assert count(b, "dialog.fb-modal fieldset[data-aspect=target_change]") == 1
    assert count(b, "dialog.fb-modal fieldset[data-aspect=plan_delta]") == 0
    assert count(b, "dialog.fb-modal fieldset[data-aspect=plan_endorsement]") == 0
    assert count(b, "dialog.fb-modal fieldset[data-aspect=preferences_delta]") == 1
    # Rejecting the objective opens a box for the goal in the owner's words (stored as the note).
    b.click("dialog.fb-modal fieldset[data-aspect=target_endorsement] label[data-choice=reject]")
    b.wait("dialog.fb-modal fieldset[data-aspect=target_endorsement] .emerging-goal textarea")
    b.fill("dialog.fb-modal fieldset[data-aspect=target_endorsement] .emerging-goal textarea", GOAL)
    b.click("dialog.fb-modal fieldset[data-aspect=target_endorsement] .save-note")
    b.wait("dialog.fb-modal fieldset[data-aspect=target_endorsement] .ctl-status[data-field=note]", "Saved.")
    assert_layout(b.measure(), f"{name} modal workspace", min_timestamps=1)
    b.shot(f"{name}-workspace-modal")
    # Two artifacts written in that turn: two cards, each rated on its own; no delta on a first version.
    b.click("dialog.fb-modal [role=tab][data-section=artifacts]")
    b.wait("dialog.fb-modal .artifact-card[data-artifact='2']")
    assert count(b, "dialog.fb-modal .artifact-card") == 2
    assert count(b, "dialog.fb-modal fieldset[data-aspect=artifact_delta]") == 0
    assert count(b, "dialog.fb-modal .artifact-card fieldset[data-aspect=artifact_satisfaction]") == 2
    b.click("dialog.fb-modal .artifact-card[data-artifact='2'] fieldset[data-aspect=artifact_fit] label[data-choice=fits]")
    b.wait("dialog.fb-modal .artifact-card[data-artifact='2'] fieldset[data-aspect=artifact_fit] .ctl-status", "Saved.")
    b.shot(f"{name}-workspace-artifacts")
    b.click("dialog.fb-modal .modal-close")
    b.gone("dialog.fb-modal")

    # The next turn arrives: the preferences' ping goes (the new turn did not change them); the revised
    # artifact pings; its card asks the delta question.
    b.fill("#chat-input", TURN2)
    b.click("#chat-send")
    b.wait("article.msg.assistant[data-turn='2']")
    b.wait(".workspace .ws-turn", "As of turn 3")
    until(b, ".workspace .ping", 1)
    assert count(b, ".workspace .ws-artifact[data-artifact='1'] .ping") == 1
    b.click(".workspace .ws-artifact[data-artifact='1'] .ws-artifact-title")
    b.wait("dialog.fb-modal .artifact-card[data-artifact='1']")
    assert count(b, "dialog.fb-modal .artifact-card") == 1
    assert count(b, "dialog.fb-modal fieldset[data-aspect=artifact_delta]") == 1
    b.click("dialog.fb-modal .modal-close")
    b.gone("dialog.fb-modal")
    until(b, ".workspace .ping", 0)  # opened: its ping is gone


async def seed(stack) -> str:
    chat = stack.chat()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Docs", agent="reference"), request_id=str(uuid.uuid4())), metadata=stack.md())
    for content in (TURN0, TURN1):
        await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content=content, request_id=str(uuid.uuid4())),
                               metadata=stack.md())
    return inst.name


def _chromium(width: int, site: str, gateway_url: str, token: str, agent_id: str) -> None:
    with engines.chromium(width, HEIGHT) as (b,):
        workspace_flow(b, "chromium", width, site, gateway_url, token, agent_id)
        # prefers-reduced-motion: the ping stays as a badge and does not pulse.
        page = b.page
        page.emulate_media(reduced_motion="reduce")
        page.reload()
        page.locator(".workspace .ws-panel").first.wait_for(state="visible")
        page.fill("#chat-input", "Write a glossary.")
        page.click("#chat-send")
        page.locator(".workspace .ping-cloud", has_text="Just updated").first.wait_for(state="visible")
        assert page.evaluate("() => getComputedStyle(document.querySelector('.workspace .ping-dot')).animationName") == "none"
        page.screenshot(path=str(ARTIFACTS / f"chromium-{width}-workspace-reduced-motion.png"), full_page=True)


def _webkit(width: int, site: str, gateway_url: str, token: str, agent_id: str) -> None:
    with engines.webkit(width, HEIGHT) as b:
        workspace_flow(b, "webkit", width, site, gateway_url, token, agent_id)


async def _run(stack, tmp_path, engine, width: int) -> str:
    inst = await seed(stack)
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            await asyncio.to_thread(engine, width, site, envoy.url, stack.token(), inst.split("/")[-1])
    return inst


async def _goal_stored(stack, inst: str) -> None:
    got = (await stack.feedback().ListRatings(pb.ListRatingsRequest(conversation=inst, turn_index=0),
                                              metadata=stack.md())).ratings
    (r,) = [x for x in got if x.aspect == "target_endorsement"]
    assert (r.scope, r.choice, r.sentiment, r.note) == (pb.RATING_SCOPE_OBJECTIVE, "reject", pb.RATING_SENTIMENT_NEGATIVE, GOAL)
    (fit,) = [x for x in got if x.aspect == "artifact_fit"]
    assert (fit.scope, fit.artifact_id, fit.choice) == (pb.RATING_SCOPE_ARTIFACT, "2", "fits")


@pytest.mark.parametrize("width", [1280, 320])
async def test_workspace_panels_in_chromium(stack, tmp_path, width):
    await _goal_stored(stack, await _run(stack, tmp_path, _chromium, width))


@pytest.mark.parametrize("width", [1280, 320])
async def test_workspace_panels_in_webkit(stack, tmp_path, width):
    await _goal_stored(stack, await _run(stack, tmp_path, _webkit, width))
