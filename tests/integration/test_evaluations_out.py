"""Evaluations flow out like the owners' ratings (issue 24): an evaluation a real OpenTelemetry SDK sends
(Python, OTLP/gRPC, to the real collector, handed over to the feedback service) reaches the owner's open
WatchFeedback stream and a signed webhook (a real HTTP receiver verifying with the Standard Webhooks
library) once, as kind EVALUATION with its author kind; a repeat the collector delivers again is no
event; another owner's stream never carries it. Two evaluators of one service (no `identifier`: the key
falls back to its `service.name`) with different `gen_ai.evaluation.name`s are two ratings, not one."""
from __future__ import annotations

import asyncio

from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.common.auth import SCOPE_FEEDBACK_ADMIN, SCOPE_FEEDBACK_READ
from tests.helpers.evaluations import gen_ai_event, judge, outbox, turn_evaluations
from tests.helpers.feedback import new_instance, rid, send, wait_until
from tests.helpers.webhooks import Receiver, feed_event_ids
from tests.stack import Stack, start_stack

FAST = {"collector": {"evaluations_retry_first_s": 0.2, "evaluations_retry_max_s": 0.5, "evaluations_poll_s": 0.2},
        "feedback": {"webhook_backoff_first_s": 0.1, "webhook_backoff_max_s": 0.4}}
EVALUATION, RATING = pb.FEEDBACK_EVENT_KIND_EVALUATION, pb.FEEDBACK_EVENT_KIND_RATING
CREATED, UPDATED = pb.FEEDBACK_EVENT_TYPE_CREATED, pb.FEEDBACK_EVENT_TYPE_UPDATED


async def _events(call, until, timeout_s: float = 10.0) -> list[pb.FeedbackEvent]:
    """Events read from an open stream until `until(events)`; each read waits at most `timeout_s` (the
    heartbeat is 15 s, so a stream nobody woke fails here)."""
    got: list[pb.FeedbackEvent] = []
    while not until(got):
        m = await asyncio.wait_for(call.read(), timeout_s)
        if m.HasField("event"):
            got.append(m.event)
    return got


async def _start(stack: Stack, md, **kw):
    """An open stream (its first message, the heartbeat naming its position, read)."""
    call = stack.feedback().WatchFeedback(pb.WatchFeedbackRequest(**kw), metadata=md)
    first = await asyncio.wait_for(call.read(), 10)
    assert not first.HasField("event")
    return call


async def _put(stack: Stack, conversation: str, turn: int, sub: str) -> pb.Rating:
    return await stack.feedback().PutRating(pb.PutRatingRequest(rating=pb.Rating(
        conversation=conversation, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
        sentiment=pb.RATING_SENTIMENT_POSITIVE), request_id=rid()), metadata=stack.md(sub))


async def test_an_evaluation_reaches_its_owner_s_stream_and_a_webhook_once_each_evaluator_apart(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, **FAST)
    tp = judge(stack.ports["otlp_grpc"])  # service.name `llm-judge`, no identifier on its events
    receiver = Receiver()
    calls = []
    try:
        await receiver.up()
        fb, admin = stack.feedback(), stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
        sub = await fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
            webhook_subscription=pb.WebhookSubscription(url=receiver.url), request_id=rid()), metadata=admin)
        receiver.secret = sub.secret
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        bob_inst = await new_instance(stack, "bob")
        bob_t = await send(stack, bob_inst, "hi", sub="bob")
        alice = await _start(stack, stack.md("alice", (SCOPE_FEEDBACK_READ,)))
        bob = await _start(stack, stack.md("bob", (SCOPE_FEEDBACK_READ,)))
        judged = await _start(stack, admin, kind=EVALUATION, aspect="groundedness")
        calls += [alice, bob, judged]

        # Two evaluation names from one service, each sent twice (an exporter retry, a pipeline re-run).
        for _ in range(2):
            await gen_ai_event(tp, t.trace_id, "relevance", label="relevant", score=0.9, explanation="on topic")
            await gen_ai_event(tp, t.trace_id, "groundedness", label="ungrounded", score=0.1)
        stored = await wait_until(lambda: turn_evaluations(stack, inst, t.reply.turn_index), lambda e: len(e) == 2)
        assert sorted((e.aspect, e.evaluator, e.version) for e in stored) == [
            ("groundedness", "llm-judge", 1), ("relevance", "llm-judge", 1)]
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)  # every copy delivered
        created = await _events(alice, lambda ev: len(ev) == 2)
        # Its producer changes one: an update, under the same name.
        await gen_ai_event(tp, t.trace_id, "relevance", label="irrelevant", score=0.2, explanation="off topic")
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)
        # The owner's own rating last: a stream that reaches it has been sent everything before it.
        await _put(stack, inst, t.reply.turn_index, "alice")
        later = await _events(alice, lambda ev: any(e.kind == RATING for e in ev))

        by_name = {e.aspect: e for e in await turn_evaluations(stack, inst, t.reply.turn_index)}
        assert {(e.type, e.kind, e.name) for e in created} == {
            (CREATED, EVALUATION, by_name["relevance"].name), (CREATED, EVALUATION, by_name["groundedness"].name)}
        assert [(e.type, e.kind, e.name) for e in later[:-1]] == [(UPDATED, EVALUATION, by_name["relevance"].name)]
        assert later[-1].kind == RATING and len(later) == 2  # the repeats made no event
        for e in (*created, *later[:-1]):
            r = e.rating
            assert e.owner == "alice" and r.name == e.name and r.name.startswith("evaluations/")
            assert (r.author_kind, r.evaluator, r.user, r.conversation) == (pb.AUTHOR_KIND_LLM, "llm-judge", "alice", inst)
        updated = later[0].rating
        # The owner reads the evaluator's words (as GetTurnFeedback shows them to her).
        assert (updated.label, updated.score, updated.note, updated.version) == ("irrelevant", 0.2, "off topic", 2)
        assert not later[0].text_omitted

        # Bob's stream: his own rating is the first thing it carries (alice's evaluations were never in it).
        await _put(stack, bob_inst, bob_t.reply.turn_index, "bob")
        (first,) = await _events(bob, lambda ev: len(ev) == 1)
        assert (first.kind, first.owner) == (RATING, "bob")
        # An admin filtering evaluations of one name: that one, without the words unless include_text.
        (g,) = await _events(judged, lambda ev: len(ev) == 1)
        assert (g.kind, g.name, g.rating.aspect) == (EVALUATION, by_name["groundedness"].name, "groundedness")
        assert g.text_omitted and g.rating.note == "" and g.rating.author_kind == pb.AUTHOR_KIND_LLM

        # The webhook: every event of the feed, in order, signed; evaluations typed as such.
        expected = await feed_event_ids(database_url)
        async def delivered() -> list[str]:
            return [p["data"]["id"] for p in receiver.got]

        await wait_until(delivered, lambda ids: ids == expected)
        assert receiver.bad == []
        assert [p["type"] for p in receiver.got] == ["evaluation.created", "evaluation.created", "evaluation.updated",
                                                     "rating.created", "rating.created"]
        hooked = receiver.got[2]["data"]
        assert (hooked["name"], hooked["kind"]) == (by_name["relevance"].name, "FEEDBACK_EVENT_KIND_EVALUATION")
        assert (hooked["rating"]["authorKind"], hooked["rating"]["evaluator"]) == ("AUTHOR_KIND_LLM", "llm-judge")
        assert "off topic" not in str(receiver.got) and hooked["textOmitted"] is True
    finally:
        for c in calls:
            c.cancel()
        tp.shutdown()
        await receiver.down()
        await stack.stop()
