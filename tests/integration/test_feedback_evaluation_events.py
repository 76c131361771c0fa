"""Ratings and reports leave as OpenTelemetry `gen_ai.evaluation.result` events and OpenInference
annotations (issue 24): the whole stack exports its spans to our collector, which forwards them over
OTLP/gRPC to a receiver here; the receiver decodes them with the OpenTelemetry proto and the test checks
the conventions' attribute names and values, the link to the rated turn, and that no owner's words left.
"""
from __future__ import annotations

import asyncio
import time

from agentfeedback.feedback.v1 import feedback_pb2 as pb

from tests.helpers.feedback import flag, new_instance, rid, send
from tests.helpers.otlp import start_downstream
from tests.stack import start_stack


def _attrs(kvs) -> dict[str, object]:
    out = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out


async def test_ratings_and_reports_become_gen_ai_evaluation_events_and_openinference_annotations(database_url, tmp_path):
    down, server, port = await start_downstream()
    stack = await start_stack(database_url, tmp_path, collector={"forward_endpoint": f"127.0.0.1:{port}"})
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        await stack.feedback().PutRating(pb.PutRatingRequest(rating=pb.Rating(
            conversation=inst, turn_index=t.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="accuracy",
            sentiment=pb.RATING_SENTIMENT_NEGATIVE, note="the owner's own words"), request_id=rid()),
            metadata=stack.md())
        report = await flag(stack, t.reply.name, "the owner's complaint", sentiment=pb.SENTIMENT_BAD)
        deadline = time.monotonic() + 20
        while len([s for s in down.spans if s.name == "feedback.evaluation"]) < 2:
            assert time.monotonic() < deadline, [s.name for s in down.spans]
            await stack.aflush_spans()
            await asyncio.sleep(0.2)
        carriers = [s for s in down.spans if s.name == "feedback.evaluation"]
        by_name = {_attrs(s.attributes)["annotations.0.annotation.name"]: s for s in carriers}
        rating, rep = by_name["accuracy"], by_name["report"]

        a = _attrs(rating.attributes)
        assert a["openinference.span.kind"] == "EVALUATOR"
        assert a["annotations.0.annotation.label"] == "negative" and a["annotations.0.annotation.score"] == -1.0
        assert a["annotations.0.annotation.annotator_kind"] == "HUMAN"
        assert a["annotations.0.annotation.identifier"] == f"{inst}/turns/{t.reply.turn_index}/message/accuracy/"
        (event,) = [e for e in rating.events if e.name == "gen_ai.evaluation.result"]
        assert _attrs(event.attributes) == {"gen_ai.evaluation.name": "accuracy", "gen_ai.evaluation.score.label": "negative",
                                            "gen_ai.evaluation.score.value": -1.0, "gen_ai.response.id": t.reply.name}
        (link,) = rating.links
        assert link.trace_id.hex() == t.trace_id  # the rated turn's trace
        assert _attrs(link.attributes) == {"feedback.link": "rated_turn"}

        r = _attrs(rep.attributes)
        assert (r["annotations.0.annotation.label"], r["annotations.0.annotation.score"]) == ("bad", -1.0)
        assert r["annotations.0.annotation.identifier"] == report.name
        (event,) = [e for e in rep.events if e.name == "gen_ai.evaluation.result"]
        assert _attrs(event.attributes)["gen_ai.evaluation.name"] == "report"
        assert rep.links[0].trace_id.hex() == t.trace_id
        words = str([(s.attributes, [e.attributes for e in s.events]) for s in carriers])
        assert "owner's" not in words
    finally:
        await stack.stop()
        await server.stop(0)
