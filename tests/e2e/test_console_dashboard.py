"""The operator dashboard (feedback:admin) in a real browser against data this test made over gRPC as
two owners: every panel shows exactly that data — headline, sentiment split per dimension, the trend,
the small multiples, the completion funnel and latest states (charts drawn by uPlot, their numbers in the
table under each), negative signals across scopes with paging, the recent feed's filters, the reports
table with File issue, and the per-turn viewer. A fork's branch copies move no figure; another system's
evaluation has a table of its own and moves none of the owners' figures.
"""
from __future__ import annotations

import uuid

import pytest
from playwright.async_api import Page, expect

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.auth import ALL_SCOPES, SCOPE_FEEDBACK_EVALUATIONS
from tests.helpers.grpcweb import CONSOLE_DIST, gateway, static_site
from tests.helpers.console import browser_page, shot, sign_in

pytestmark = pytest.mark.browser
MSG, CONV, ART = pb.RATING_SCOPE_MESSAGE, pb.RATING_SCOPE_CONVERSATION, pb.RATING_SCOPE_ARTIFACT
POS, NEU, NEG = pb.RATING_SENTIMENT_POSITIVE, pb.RATING_SENTIMENT_NEUTRAL, pb.RATING_SENTIMENT_NEGATIVE
ARTIFACTS = 9  # alice rates nine artifacts of one turn "unusable": negative signals need a second page


async def put(stack, sub, inst, turn, scope, aspect, sentiment, *, choice="", reasons=(), artifact="", paths=None):
    await stack.feedback().PutRating(pb.PutRatingRequest(
        rating=pb.Rating(conversation=inst, turn_index=turn, scope=scope, aspect=aspect, sentiment=sentiment,
                         choice=choice, reasons=list(reasons), artifact_id=artifact),
        update_mask={"paths": paths or ["sentiment"] + (["choice"] if choice else []) + (["reasons"] if reasons else [])},
        request_id=str(uuid.uuid4())), metadata=stack.md(sub))


async def seed(stack) -> dict[str, str]:
    chat = stack.chat()

    async def instance(sub: str, turns: list[str]) -> str:
        inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name=f"{sub}'s desk", agent="reference"), request_id=str(uuid.uuid4())),
            metadata=stack.md(sub))
        for t in turns:
            await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content=t, request_id=str(uuid.uuid4())),
                                   metadata=stack.md(sub))
        return inst.name

    # Turn 1 also writes the nine artifacts (ids 1..9) alice rates below: a rated artifact id must be real.
    memos = ", ".join(f"a memo {i}" for i in range(1, ARTIFACTS + 1))
    a = await instance("alice", ["How many agents do you have in total?", f"List my subordinates please, and write {memos}."])
    b = await instance("bob", ["what is the weather?"])
    await put(stack, "alice", a, 0, MSG, "reaction", POS)
    await put(stack, "alice", a, 1, MSG, "reaction", NEG)
    await put(stack, "alice", a, 1, MSG, "reply_judgement", NEG, choice="did_not_work", reasons=["ignored_constraints"])
    await put(stack, "alice", a, 1, CONV, "task_completion", POS, choice="complete")
    for i in range(1, ARTIFACTS + 1):
        await put(stack, "alice", a, 1, ART, "artifact_quality", NEG, choice="unusable", artifact=str(i))
    await put(stack, "bob", b, 0, CONV, "task_completion", NEU, choice="partly")
    msgs = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=b), metadata=stack.md("bob"))
    reply = [m for m in msgs.messages if m.role == chat_pb2.ROLE_ASSISTANT][0]
    await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=reply.name, body="The weather tool failed in the pipeline.", surface=pb.SURFACE_CHAT,
                             sentiment=pb.SENTIMENT_BAD, category=pb.CATEGORY_TOOL_FAILURE),
        request_id=str(uuid.uuid4())), metadata=stack.md("bob"))
    # A fork of alice's conversation: its copied ratings (origin BRANCH_COPY) must move no figure.
    await chat.ForkConversation(chat_pb2.ForkConversationRequest(parent=a, turn_index=1, request_id=str(uuid.uuid4())),
                                metadata=stack.md("alice"))
    return {"alice": a, "bob": b}


async def numbers(page: Page, chart: str) -> dict[str, list[str]]:
    rows = page.locator(f"table.chart-data[data-chart='{chart}'] tbody tr")
    out = {}
    for r in await rows.all():
        out[await r.get_attribute("data-row")] = [c.strip() for c in await r.locator("td").all_text_contents()]
    return out


async def evaluate(stack, conversation: str, sub: str, turn: int, name: str, kind: int, label: str, score: float) -> None:
    """An evaluation of a turn handed over as the trace collector does (AcceptEvaluations)."""
    msgs = await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=conversation), metadata=stack.md(sub))
    trace_id = next(m.trace_id for m in msgs.messages if m.role == chat_pb2.ROLE_ASSISTANT and m.turn_index == turn)
    got = await stack.feedback().AcceptEvaluations(pb.AcceptEvaluationsRequest(evaluations=[pb.Evaluation(
        trace_id=trace_id, name=name, label=label, score=score, author_kind=kind, identifier="judge-v1")]),
        metadata=stack.md("tracecollector", (SCOPE_FEEDBACK_EVALUATIONS,)))
    assert got.outcomes[0].state == pb.EvaluationOutcome.STATE_ACCEPTED, got


async def test_dashboard_panels_show_the_data_the_test_made(stack, tmp_path):
    convs = await seed(stack)
    # A judge likes the reply alice disliked: its own table, never in her figures.
    await evaluate(stack, convs["alice"], "alice", 1, "reaction", pb.AUTHOR_KIND_LLM, "positive", 0.75)
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1280, 1000) as page:
                await sign_in(page, site, envoy.url, stack.token("ops", ALL_SCOPES))
                await page.goto(f"{site}/#/stats?window=7")
                await expect(page.locator("#window-days")).to_have_value("7")
                for key, want in (("likes", "1"), ("dislikes", "1"), ("reports", "1"), ("tasks-completed", "1")):
                    await expect(page.locator(f".stats-head [data-stat={key}] .stat-value")).to_have_text(want)
                trend = await numbers(page, "trend")
                assert len(trend) == 7
                today = list(trend.values())[-1]
                # positive: like + "complete"; negative: dislike + did_not_work + 9 artifacts; reports: bob's.
                assert today == ["2", str(2 + ARTIFACTS), "1"], today
                await page.select_option("#window-days", "30")
                await expect(page).to_have_url(f"{site}/#/stats?window=30")
                await expect(page.locator(".stats-head [data-stat=likes] .stat-value")).to_have_text("1")
                assert len(await numbers(page, "trend")) == 30
                assert await page.locator("figure[data-chart=trend] canvas").count() >= 1  # drawn by uPlot

                split = page.locator("table.aspects tbody tr")
                await expect(split).to_have_count(4)
                row = page.locator("table.aspects tr[data-dimension='message/reaction'] td")
                assert [t.strip() for t in (await row.all_inner_texts())[2:5]] == ["1", "0", "1"]
                row = page.locator("table.aspects tr[data-dimension='conversation/task_completion'] td")
                assert [t.strip() for t in (await row.all_inner_texts())[2:5]] == ["1", "1", "0"]
                # Reports by category (the API's breakdown; the dashboard once lost it unnoticed).
                cats = page.locator("table.report-categories tbody tr")
                await expect(cats).to_have_count(1)
                assert [t.strip() for t in await cats.first.locator("td").all_inner_texts()] == ["Tool failure", "1"]
                ev = page.locator("table.evaluations tbody tr")
                await expect(ev).to_have_count(1)
                assert [t.strip() for t in await page.locator("table.evaluations tr[data-evaluation='llm/reaction'] td"
                                                              ).all_inner_texts()] == [
                    "LLM judge", "reaction", "1", "0", "0", "1", "0.75"]
                await expect(page.locator(".multiples figure.chart")).to_have_count(4)
                art = await numbers(page, "dim-artifact-artifact_quality")
                assert list(art.values())[-1] == ["0", "0", str(ARTIFACTS)]
                assert await page.locator("figure[data-chart='dim-message-reaction'] canvas").count() >= 1

                assert await numbers(page, "funnel") == {"engaged": ["2"], "answered": ["2"], "complete": ["1"]}
                assert await numbers(page, "latest-state") == {"Done": ["1"], "Partly done": ["1"]}

                # Negative signals as a table paged with the API's tokens: ten rows, then the rest.
                neg = page.locator(".negative-feed tbody tr.dt-row")
                await expect(neg).to_have_count(10)
                first = [await r.get_attribute("data-key") for r in await neg.all()]
                await page.locator(".negative-feed-box .dt-next").click()
                await expect(neg).to_have_count(2 + ARTIFACTS + 1 - 10)  # dislike, did_not_work, 9 artifacts, the report
                second = [await r.get_attribute("data-key") for r in await neg.all()]
                await expect(page.locator(".negative-feed-box .dt-next")).to_be_disabled()
                keys = first + second
                assert len(set(keys)) == 2 + ARTIFACTS + 1
                assert len([k for k in keys if k.startswith("feedback/")]) == 1
                await shot(page, "console-dashboard")

                feed = page.locator(".recent-feed tbody tr.dt-row")
                await page.select_option("#feed-category", label="Tool failure")
                await expect(feed).to_have_count(1)
                await feed.first.locator(".dt-expand").click()
                await expect(page.locator(".recent-feed tr.dt-detail")).to_contain_text("The weather tool failed in the pipeline.")
                await page.select_option("#feed-category", "")
                await page.select_option("#feed-scope", label="conversation")
                await expect(feed).to_have_count(2)
                await page.select_option("#feed-scope", "")
                await page.fill("#feed-text", "pipeline")
                await page.locator(".feed-filters button[type=submit]").click()
                await expect(feed).to_have_count(1)

                # The reports table: FileFeedback is owner-scoped, so an operator's row for bob's report
                # says the owner files it; bob (an owner with feedback:admin) files it from the table.
                report = page.locator(".reports-table tbody tr.dt-row")
                await expect(report).to_have_count(1)
                await expect(report.locator(".not-yours")).to_have_text("owner files")
                await sign_in(page, site, envoy.url, stack.token("bob", ALL_SCOPES))
                await page.goto(f"{site}/#/stats")
                await report.locator(".act-file").click()
                await expect(page.locator(".reports-table tbody tr.dt-row a.issue-link")).to_be_visible()
                await expect(page.locator(".reports-table tbody tr.dt-row .badge.status-filed")).to_be_visible()
    listed = await stack.feedback().ListFeedback(pb.ListFeedbackRequest(), metadata=stack.md("bob"))
    assert listed.feedback[0].status == pb.STATUS_FILED and listed.feedback[0].issue_url.startswith("file://")
    assert convs["alice"] != convs["bob"]


async def test_dashboard_reason_and_choice_filters_and_the_turn_viewer(stack, tmp_path):
    await seed(stack)
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1280, 1000) as page:
                await sign_in(page, site, envoy.url, stack.token("ops", ALL_SCOPES))
                await page.goto(f"{site}/#/stats")
                feed = page.locator(".recent-feed tbody tr.dt-row")
                await page.select_option("#feed-reason", "ignored_constraints")
                await expect(feed).to_have_count(1)
                await expect(feed.first.locator(".feed-choice")).to_have_text("Didn't work")
                await expect(feed.first.locator(".reason-badge")).to_have_text("Ignored my constraints")
                # The per-turn viewer: everything alice said about that turn, read-only.
                await feed.first.locator(".dt-expand").click()
                await page.locator(".recent-feed tr.dt-detail .view-turn").click()
                view = page.locator(".turn-view")
                await expect(view.locator(".tv-ratings .feed-item")).to_have_count(3 + ARTIFACTS)
                await expect(view.locator(".tv-reports .feed-item")).to_have_count(0)
                await expect(view.locator(".tv-ratings button")).to_have_count(0)  # nothing to change there
                await page.select_option("#feed-reason", "")
                await page.select_option("#feed-choice", "partly")
                await expect(feed).to_have_count(1)
                await feed.first.locator(".dt-expand").click()
                await page.locator(".recent-feed tr.dt-detail .view-turn").click()
                await expect(view.locator(".tv-reports .feed-item")).to_have_count(1)
                await expect(view.locator(".tv-reports")).to_contain_text("The weather tool failed in the pipeline.")
                await shot(page, "console-dashboard-turn-viewer")
