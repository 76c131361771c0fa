"""The feedback modal end to end in a real browser (Debian chromium) against the real stack: the
like/dislike glyph saves at once and opens the reply section; the judgement, its reasons and the note
are three fields of one rating, each saved alone under its update mask; a write that went stale (the same
rating changed from another tab) shows the current value and is applied on retry without touching the
other fields; the trajectory questions appear only when they apply (goal questions from 3 turns, the
branch question on a fork); the live document card rates artifact 0; the check-in after the latest
reply records nothing; "Branch from here" forks, and copied ratings show as copies until edited.
"""
from __future__ import annotations

import re
import uuid

import pytest
from playwright.async_api import Page, expect

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from tests.helpers.grpcweb import CONSOLE_DIST, gateway, static_site
from tests.helpers.console import browser_page, shot, sign_in

pytestmark = pytest.mark.browser


async def ratings(stack, instance: str) -> dict[tuple[int, int, str, str], pb.Rating]:
    r = await stack.feedback().ListRatings(pb.ListRatingsRequest(conversation=instance, page_size=500),
                                           metadata=stack.md())
    return {(x.turn_index, x.scope, x.aspect, x.artifact_id): x for x in r.ratings}


async def three_turns(stack) -> str:
    chat = stack.chat()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Planner", agent="reference"), request_id=str(uuid.uuid4())),
        metadata=stack.md())
    for text in ("How many agents do you have in total?", "List my subordinates please", "what is the weather?"):
        await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content=text, request_id=str(uuid.uuid4())),
                               metadata=stack.md())
    return inst.name


async def pick(page: Page, section: str, aspect: str, label: str) -> None:
    dialog = page.locator("dialog.fb-modal[open]")
    await dialog.locator(f".modal-panel[data-section={section}] fieldset[data-aspect={aspect}] label", has_text=label).click()


async def test_modal_fields_masks_stale_write_checkin_and_fork(stack, tmp_path):
    inst = await three_turns(stack)
    agent_id = inst.split("/")[-1]
    MSG, CONV, ART = pb.RATING_SCOPE_MESSAGE, pb.RATING_SCOPE_CONVERSATION, pb.RATING_SCOPE_ARTIFACT
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1100, 900) as page:
                await sign_in(page, site, envoy.url, stack.token())
                await page.goto(f"{site}/#/agents/{agent_id}/chat")
                replies = page.locator("article.msg.assistant")
                await expect(replies).to_have_count(3)
                await expect(replies.nth(0).locator(".glyph-pair")).to_have_attribute("data-lit", "none")

                # Like saves at once and opens the reply section.
                await replies.nth(2).locator(".act-like").click()
                dialog = page.locator("dialog.fb-modal[open]")
                await expect(dialog.locator("[role=tab][data-section=reply]")).to_have_attribute("aria-selected", "true")
                assert (await ratings(stack, inst))[(2, MSG, "reaction", "")].sentiment == pb.RATING_SENTIMENT_POSITIVE

                # The judgement (choice + its sentiment), then reasons of that judgement, then a note.
                judgement = dialog.locator("fieldset[data-aspect=reply_judgement]")
                await expect(judgement.locator(".reasons")).to_have_count(0)  # no judgement yet: no reasons asked
                await pick(page, "reply", "reply_judgement", "Didn't work")
                await expect(judgement.locator("label.reason", has_text="Ignored my constraints")).to_be_visible()
                await expect(judgement.locator("label.reason", has_text="Saved me time")).to_have_count(0)
                r = (await ratings(stack, inst))[(2, MSG, "reply_judgement", "")]
                assert (r.choice, r.sentiment, list(r.reasons)) == ("did_not_work", pb.RATING_SENTIMENT_NEGATIVE, [])
                await judgement.locator("label.reason", has_text="Ignored my constraints").click()
                await expect(judgement.locator(".ctl-status", has_text="Saved.")).to_have_count(2)
                r = (await ratings(stack, inst))[(2, MSG, "reply_judgement", "")]
                assert (list(r.reasons), r.choice) == (["ignored_constraints"], "did_not_work")

                # Another tab changes the reasons meanwhile: the next write is stale, shows the current value,
                # and the retry applies the owner's change with the new etag — choice and note untouched.
                await stack.feedback().PutRating(pb.PutRatingRequest(
                    rating=pb.Rating(conversation=inst, turn_index=2, scope=MSG, aspect="reply_judgement",
                                     reasons=["misunderstood"], note="from the other tab"),
                    update_mask={"paths": ["reasons", "note"]}, request_id=str(uuid.uuid4())), metadata=stack.md())
                await judgement.locator("label.reason", has_text="Factually wrong").click()
                stale = judgement.locator(".ctl-status.stale")
                await expect(stale).to_contain_text("Changed meanwhile")
                await expect(stale).to_contain_text("Misunderstood the request")
                await expect(judgement.locator("label.reason[data-reason=misunderstood] input")).to_be_checked()
                await shot(page, "console-modal-stale")
                await stale.locator("button.retry-stale").click()
                await expect(judgement.locator(".ctl-status[data-field=reasons]")).to_have_text("Saved.")
                r = (await ratings(stack, inst))[(2, MSG, "reply_judgement", "")]
                assert sorted(r.reasons) == ["factually_wrong", "ignored_constraints"]
                assert (r.choice, r.note) == ("did_not_work", "from the other tab")
                await judgement.locator("textarea.note").fill("It listed 41 of 120.")
                await judgement.locator("button.save-note").click()
                await expect(judgement.locator(".ctl-status[data-field=note]")).to_have_text("Saved.")
                r = (await ratings(stack, inst))[(2, MSG, "reply_judgement", "")]
                assert (r.note, r.choice, sorted(r.reasons)) == ("It listed 41 of 120.", "did_not_work",
                                                                ["factually_wrong", "ignored_constraints"])

                # The whole trajectory: 4-state completion, goal questions (3 turns), no branch question.
                await dialog.locator("[role=tab][data-section=trajectory]").click()
                panel = dialog.locator(".modal-panel[data-section=trajectory]")
                await expect(panel.locator("fieldset[data-aspect=task_completion] label.choice")).to_have_count(4)
                await expect(panel.locator("fieldset[data-aspect=goal_evolution]")).to_be_visible()
                await expect(panel.locator("fieldset[data-aspect=goal_ownership]")).to_be_visible()
                await expect(panel.locator("fieldset[data-aspect=branch_preference]")).to_have_count(0)
                await pick(page, "trajectory", "task_completion", "Partly done")
                await expect(panel.locator("fieldset[data-aspect=task_completion] .ctl-status[data-field=choice]")).to_have_text("Saved.")
                r = (await ratings(stack, inst))[(2, CONV, "task_completion", "")]
                assert (r.choice, r.sentiment) == ("partly", pb.RATING_SENTIMENT_NEUTRAL)

                # Artifacts: the turn reports none, so one card rates the live document (artifact 0).
                await dialog.locator("[role=tab][data-section=artifacts]").click()
                card = dialog.locator(".artifact-card[data-artifact='0']")
                await expect(card.locator("h3")).to_have_text("The live document")
                await card.locator("label.choice", has_text="Needs edits").click()
                await expect(card.locator(".ctl-status[data-field=choice]")).to_have_text("Saved.")
                assert (await ratings(stack, inst))[(2, ART, "artifact_quality", "0")].choice == "needs_edits"
                await dialog.locator(".modal-close").click()
                await expect(replies.nth(2).locator(".glyph-pair")).to_have_attribute("data-lit", "like")
                # Every row's controls are at full strength without hover (issue 28: touch has no hover, and a
                # subdued row read as disabled), with feedback or without.
                await page.mouse.move(0, 0)
                opacity = "e => getComputedStyle(e).opacity"
                assert await replies.nth(2).locator(".actions").evaluate(opacity) == "1"
                assert await replies.nth(1).locator(".actions").evaluate(opacity) == "1"

                # The check-in after the latest reply: records nothing, routes into the modal.
                before = await ratings(stack, inst)
                await page.fill("#chat-input", "thanks, one more: how many agents again?")
                await page.click("#chat-send")
                checkin = page.locator(".checkin")
                await expect(checkin).to_be_visible()
                await expect(page.locator("#chat-input")).to_be_enabled()  # never blocks the next message
                assert (await ratings(stack, inst)).keys() == before.keys()
                await checkin.locator(".checkin-trajectory").click()
                await expect(dialog.locator("[role=tab][data-section=trajectory]")).to_have_attribute("aria-selected", "true")
                await page.keyboard.press("Escape")

                # Judge turn 0, then branch from turn 1: the fork shows turn 0's rating as a copy until edited.
                await replies.nth(0).locator(".act-trajectory").click()
                await dialog.locator("[role=tab][data-section=reply]").click()
                await pick(page, "reply", "reply_judgement", "Worked well")
                await expect(dialog.locator("fieldset[data-aspect=reply_judgement] .ctl-status[data-field=choice]")).to_have_text("Saved.")
                await page.keyboard.press("Escape")
                # Any feedback of the turn (here a judgement, no like or dislike) lights the glyph.
                await expect(replies.nth(0).locator(".glyph-pair")).to_have_attribute("data-lit", "feedback")
                await replies.nth(1).locator("button.more").click()
                await replies.nth(1).locator(".act-branch").click()
                await expect(page.locator(".fork-banner")).to_contain_text("Branched from")
                forked = page.locator("article.msg.assistant")
                await expect(forked).to_have_count(2)
                await expect(page.locator("article.msg .badge.copy", has_text="from the original")).to_have_count(4)
                fork_id = page.url.split("#/agents/")[1].split("/")[0]
                fork = f"instances/{fork_id}"
                assert fork != inst
                copied = (await ratings(stack, fork))[(0, MSG, "reply_judgement", "")]
                assert copied.origin == pb.RATING_ORIGIN_BRANCH_COPY
                await expect(forked.nth(0).locator(".glyph-pair")).to_have_class(re.compile(r"\bcopy\b"))
                await forked.nth(0).locator(".act-trajectory").click()
                await expect(dialog.locator("fieldset[data-aspect=branch_preference]")).to_be_visible()
                await dialog.locator("[role=tab][data-section=reply]").click()
                legend = dialog.locator("fieldset[data-aspect=reply_judgement] legend")
                await expect(legend.locator(".badge.copy")).to_have_text("copy")
                await pick(page, "reply", "reply_judgement", "Mixed")
                await expect(legend.locator(".badge.copy")).to_have_count(0)
                edited = (await ratings(stack, fork))[(0, MSG, "reply_judgement", "")]
                assert (edited.origin, edited.choice) == (pb.RATING_ORIGIN_USER, "mixed")
                original = (await ratings(stack, inst))[(0, MSG, "reply_judgement", "")]
                assert (original.origin, original.choice) == (pb.RATING_ORIGIN_USER, "worked_well")
                await shot(page, "console-modal-fork")
