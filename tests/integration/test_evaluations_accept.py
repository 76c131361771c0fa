"""Evaluations other systems send over OTLP become ratings exactly once (issue 24): a real OpenTelemetry
SDK (Python: TracerProvider + OTLP/gRPC exporter) under a foreign resource sends the OpenTelemetry GenAI
`gen_ai.evaluation.result` event and the OpenInference annotation to the real collector, which keeps them
in its outbox and hands them over real gRPC to the feedback service, which anchors them at the chat
service (real PostgreSQL throughout). The JS SDK's copy of this is tests/e2e/test_evaluations_js.py."""
from __future__ import annotations

import datetime as dt
import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.traces.v1 import traces_pb2

from services.chat import domain as chat_domain
from services.chat.repository import Repository as ChatRepository
from services.common.auth import SCOPE_FEEDBACK_ADMIN, SCOPE_FEEDBACK_EVALUATIONS
from services.common.db import close_pool, create_pool
from tests.helpers.evaluations import annotation, gen_ai_event, judge, outbox, turn_evaluations
from tests.helpers.feedback import expect_error, new_instance, rid, send, start_feedback, wait_until
from tests.helpers.scrape import scrape, value
from tests.stack import start_stack

FAST = {"collector": {"evaluations_retry_first_s": 0.2, "evaluations_retry_max_s": 0.5, "evaluations_poll_s": 0.2}}


def _by_name(evaluations: list[pb.Rating]) -> dict[str, pb.Rating]:
    return {e.aspect: e for e in evaluations}


async def test_both_forms_become_ratings_once_and_a_changed_score_updates_it(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, **FAST)
    tp = judge(stack.ports["otlp_grpc"])
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        turn = t.reply.turn_index
        for _ in range(2):  # the same evaluations sent twice (an exporter retry, a pipeline re-run)
            await gen_ai_event(tp, t.trace_id, "relevance", label="relevant", score=0.9, explanation="on topic",
                         response_id=t.reply.name)
            await annotation(tp, t.trace_id, "correctness", label="incorrect", score=0.0, kind="LLM",
                       identifier="judge-v1/correctness", explanation="the date is wrong")
        got = await wait_until(lambda: turn_evaluations(stack, inst, turn), lambda e: len(e) == 2)
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)
        got = _by_name(await turn_evaluations(stack, inst, turn))
        assert set(got) == {"relevance", "correctness"}  # one rating each, not two
        # Four deliveries (two sends of two), one rating each: the collector counted them accepted.
        samples = await scrape(stack.metrics_port("collector"))
        assert value(samples, "agentfeedback_collector_evaluations_total", outcome="accepted") >= 2

        rel, cor = got["relevance"], got["correctness"]
        assert (rel.author_kind, rel.label, rel.score, rel.note) == (pb.AUTHOR_KIND_LLM, "relevant", 0.9, "on topic")
        assert rel.evaluator == "llm-judge" and rel.sentiment == pb.RATING_SENTIMENT_POSITIVE
        assert (rel.conversation, rel.turn_index, rel.user, rel.message) == (inst, turn, "alice", t.reply.name)
        assert (cor.author_kind, cor.label, cor.evaluator) == (pb.AUTHOR_KIND_LLM, "incorrect", "judge-v1/correctness")
        assert cor.sentiment == pb.RATING_SENTIMENT_NEGATIVE and cor.version == 1 and rel.version == 1
        assert cor.name.startswith("evaluations/")

        # The same identifier with a changed score: the one rating is updated, not a second one.
        await annotation(tp, t.trace_id, "correctness", label="correct", score=1.0, kind="LLM",
                   identifier="judge-v1/correctness")
        got = await wait_until(lambda: turn_evaluations(stack, inst, turn),
                               lambda e: _by_name(e)["correctness"].version == 2)
        cor2 = _by_name(got)["correctness"]
        assert len(got) == 2 and cor2.name == cor.name
        assert (cor2.label, cor2.score, cor2.sentiment) == ("correct", 1.0, pb.RATING_SENTIMENT_POSITIVE)
        # Another identifier under the same name is another evaluator's rating.
        await annotation(tp, t.trace_id, "correctness", label="incorrect", kind="CODE", identifier="regex-check")
        got = await wait_until(lambda: turn_evaluations(stack, inst, turn), lambda e: len(e) == 3)
        kinds = sorted((e.aspect, e.evaluator, pb.AuthorKind.Name(e.author_kind)) for e in got)
        assert kinds == [("correctness", "judge-v1/correctness", "AUTHOR_KIND_LLM"),
                         ("correctness", "regex-check", "AUTHOR_KIND_CODE"), ("relevance", "llm-judge", "AUTHOR_KIND_LLM")]
    finally:
        tp.shutdown()
        await stack.stop()


@pytest.mark.parametrize("span_store", ["clickhouse"], indirect=True)
async def test_with_spans_on_clickhouse_evaluations_still_become_ratings_once(database_url, tmp_path, collector_store):
    """The production overlay keeps spans on ClickHouse: the evaluation outbox stays in PostgreSQL,
    so evaluations are not refused there (they were: "span_store is clickhouse")."""
    settings, kw = collector_store
    stack = await start_stack(database_url, tmp_path, collector_kw=kw, collector={**settings, **FAST["collector"]})
    tp = judge(stack.ports["otlp_grpc"])
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        for _ in range(2):
            await gen_ai_event(tp, t.trace_id, "relevance", label="relevant", score=0.9)
        got = await wait_until(lambda: turn_evaluations(stack, inst, t.reply.turn_index), lambda e: len(e) == 1)
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)
        assert (got[0].aspect, got[0].author_kind, got[0].label) == ("relevance", pb.AUTHOR_KIND_LLM, "relevant")
        # The turn's spans themselves are on ClickHouse, read back through the query API.
        trace = await stack.wait_trace(t.trace_id, min_spans=3)
        assert any(sp.name == "chat.turn" for sp in trace.spans)
    finally:
        tp.shutdown()
        await stack.stop()


async def test_statistics_keep_evaluations_apart_and_our_own_events_do_not_come_back(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, **FAST)
    tp = judge(stack.ports["otlp_grpc"])
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        # The owner's own rating: emitted by the feedback service as both conventions (evaluation_events.py),
        # exported to this same collector under our resource (service.namespace agentfeedback).
        await stack.feedback().PutRating(pb.PutRatingRequest(rating=pb.Rating(
            conversation=inst, turn_index=t.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
            sentiment=pb.RATING_SENTIMENT_NEGATIVE), request_id=rid()), metadata=stack.md())
        await annotation(tp, t.trace_id, "reaction", label="positive", score=1.0, kind="LLM", identifier="judge")
        await annotation(tp, t.trace_id, "helpfulness", score=-0.5, kind="HUMAN", identifier="reviewer-7")
        await wait_until(lambda: turn_evaluations(stack, inst, t.reply.turn_index), lambda e: len(e) == 2)

        # Our own carrier span reached the collector and was stored, yet no evaluation came of it.
        await stack.aflush_spans()
        async def carriers():
            now = dt.datetime.now(dt.UTC)
            req = traces_pb2.SearchTracesRequest(span_name="feedback.evaluation", page_size=10)
            req.start_time.FromDatetime(now - dt.timedelta(hours=1))
            req.end_time.FromDatetime(now + dt.timedelta(minutes=1))
            return (await stack.traces().SearchTraces(req, metadata=stack.md())).traces

        await wait_until(carriers, lambda c: len(c) >= 1)
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)
        got = await turn_evaluations(stack, inst, t.reply.turn_index)
        assert sorted((e.aspect, e.evaluator) for e in got) == [("helpfulness", "reviewer-7"), ("reaction", "judge")]

        stats = await stack.feedback().GetFeedbackStats(pb.GetFeedbackStatsRequest(window_days=1),
                                                         metadata=stack.md("operator", (SCOPE_FEEDBACK_ADMIN,)))
        # What the owner said: their one dislike; the judge's like of the same aspect is not in it.
        assert (stats.headline.likes, stats.headline.dislikes, stats.total_ratings) == (0, 1, 1)
        by = {(pb.AuthorKind.Name(c.author_kind), c.name): (c.positive, c.neutral, c.negative, c.total, c.mean_score)
              for c in stats.evaluations}
        assert by == {("AUTHOR_KIND_HUMAN", "helpfulness"): (0, 0, 1, 1, -0.5),
                      ("AUTHOR_KIND_LLM", "reaction"): (1, 0, 0, 1, 1.0)}
    finally:
        tp.shutdown()
        await stack.stop()


async def test_an_evaluation_of_an_unknown_trace_is_kept_and_linked_when_the_turn_appears(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, **FAST)
    tp = judge(stack.ports["otlp_grpc"])
    pool = await create_pool(database_url, "chat", 1, 2)
    try:
        inst = await new_instance(stack)
        trace_id = uuid.uuid4().hex  # a turn chat has not stored yet (another replica, a slow commit)
        await gen_ai_event(tp, trace_id, "groundedness", label="fail")
        rows = await wait_until(lambda: outbox(database_url),
                                lambda r: len(r) == 1 and r[0]["last_outcome"] == "PENDING_TURN")
        assert rows[0]["attempts"] >= 1 and not await turn_evaluations(stack, inst, 0)

        # The turn appears (stored by the chat service's own code, under that trace id).
        turn = chat_domain.validate_turn(inst, "late turn", 1, "", "", "", 1000)
        await ChatRepository(pool).begin_turn("alice", turn, trace_id, uuid.uuid4().hex,
                                              dt.datetime.now(dt.UTC), 10)
        got = await wait_until(lambda: turn_evaluations(stack, inst, 0), lambda e: len(e) == 1)
        assert (got[0].aspect, got[0].label, got[0].sentiment) == ("groundedness", "fail", pb.RATING_SENTIMENT_NEGATIVE)
        await wait_until(lambda: outbox(database_url), lambda r: not r)
    finally:
        tp.shutdown()
        await close_pool(pool)
        await stack.stop()


async def test_feedback_down_loses_nothing_that_was_acknowledged(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, **FAST)
    tp = judge(stack.ports["otlp_grpc"])
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        await stack.servers["feedback"].stop(0)  # the collector's peer is gone: Export is still acknowledged
        await annotation(tp, t.trace_id, "toxicity", label="safe", kind="CODE", identifier="filter")
        rows = await wait_until(lambda: outbox(database_url), lambda r: len(r) == 1 and r[0]["attempts"] >= 2)
        assert rows[0]["last_outcome"] == "UNAVAILABLE"
        # Feedback back (a new process-equivalent on another port): the kept evaluation arrives, once.
        (tmp_path / "again").mkdir()
        again = stack.servers["feedback"] = await start_feedback(stack, tmp_path / "again")
        stack.ports["feedback"] = again.port
        stack.late["feedback"].connect(f"127.0.0.1:{again.port}")
        got = await wait_until(lambda: turn_evaluations(stack, inst, t.reply.turn_index), lambda e: len(e) == 1)
        assert (got[0].aspect, got[0].author_kind, got[0].label) == ("toxicity", pb.AUTHOR_KIND_CODE, "safe")
        await wait_until(lambda: outbox(database_url), lambda r: not r)
    finally:
        tp.shutdown()
        await stack.stop()


async def test_only_the_collector_s_credential_may_hand_over_evaluations_and_a_bad_one_is_rejected_alone(
        database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path)
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        good = pb.Evaluation(trace_id=t.trace_id, name="relevance", label="relevant", author_kind=pb.AUTHOR_KIND_LLM,
                             identifier="judge")
        bad = pb.Evaluation(trace_id=t.trace_id, name="x" * 129, label="l", author_kind=pb.AUTHOR_KIND_LLM,
                            identifier="judge")
        bidi = pb.Evaluation(trace_id=t.trace_id, name="relevance", label="\u202edetaler", author_kind=pb.AUTHOR_KIND_LLM,
                             identifier="judge")
        request = pb.AcceptEvaluationsRequest(evaluations=[bad, good, bidi])
        # An owner's token with every scope they can have is refused, at feedback and at chat.
        await expect_error(stack.feedback().AcceptEvaluations(request, metadata=stack.md()),
                           grpc.StatusCode.PERMISSION_DENIED)
        await expect_error(stack.chat().LookupTurns(chat_pb2.LookupTurnsRequest(trace_ids=[t.trace_id]),
                                                    metadata=stack.md()), grpc.StatusCode.PERMISSION_DENIED)
        collector = stack.md("tracecollector", (SCOPE_FEEDBACK_EVALUATIONS,))
        got = await stack.feedback().AcceptEvaluations(request, metadata=collector)
        states = [pb.EvaluationOutcome.State.Name(o.state) for o in got.outcomes]
        assert states == ["STATE_REJECTED", "STATE_ACCEPTED", "STATE_REJECTED"]
        assert got.outcomes[2].reason == "evaluations[2]: label must not contain control or bidi formatting characters"
        assert "evaluations[0]: name must be 1 to 128 characters" == got.outcomes[0].reason
        assert got.outcomes[1].rating.startswith("evaluations/")
        again = await stack.feedback().AcceptEvaluations(pb.AcceptEvaluationsRequest(evaluations=[good]), metadata=collector)
        assert again.outcomes[0].rating == got.outcomes[1].rating  # the same key: the same rating
        await expect_error(stack.feedback().AcceptEvaluations(pb.AcceptEvaluationsRequest(), metadata=collector),
                           grpc.StatusCode.INVALID_ARGUMENT)
    finally:
        await stack.stop()
