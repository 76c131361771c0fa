"""The same evaluations sent by the real OpenTelemetry JS SDK (issue 24): a Node process
(console/scripts/otel-evaluations.mjs: NodeTracerProvider and LoggerProvider with the OTLP/HTTP protobuf
exporters, resource `service.name` js-judge) sends the GenAI `gen_ai.evaluation.result` event as a span
event and as a log record (`eventName`, in the rated trace's context), and an OpenInference annotation, to
the collector's OTLP/HTTP port (/v1/traces, /v1/logs), twice, then changed scores; they become ratings
exactly once. Needs `make console` (node_modules). The Python SDK's copies:
tests/integration/test_evaluations_accept.py, tests/integration/test_evaluations_logs.py."""
from __future__ import annotations

import asyncio
import json
import subprocess

from agentfeedback.feedback.v1 import feedback_pb2 as pb

from tests.helpers.evaluations import outbox, turn_evaluations
from tests.helpers.feedback import new_instance, send, wait_until
from tests.helpers.grpcweb import CONSOLE_DIR
from tests.stack import start_stack

SCRIPT = CONSOLE_DIR / "scripts" / "otel-evaluations.mjs"
FAST = {"collector": {"evaluations_retry_first_s": 0.2, "evaluations_retry_max_s": 0.5, "evaluations_poll_s": 0.2}}


async def _node_sends(port: int, trace_id: str, response_id: str, events: list[dict]) -> None:
    spec = json.dumps({"trace_id": trace_id, "response_id": response_id, "events": events})
    done = await asyncio.to_thread(subprocess.run, ["node", str(SCRIPT), f"http://127.0.0.1:{port}", spec],
                                   cwd=CONSOLE_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


async def test_the_js_sdk_s_evaluations_become_ratings_exactly_once(database_url, tmp_path):
    for package in ("sdk-trace-node", "exporter-logs-otlp-proto"):
        assert (CONSOLE_DIR / "node_modules" / "@opentelemetry" / package).is_dir(), "run `make console` first"
    stack = await start_stack(database_url, tmp_path, **FAST)
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        events = [{"form": "gen_ai", "name": "relevance", "label": "relevant", "score": 0.75, "explanation": "on topic"},
                  {"form": "annotation", "name": "correctness", "label": "incorrect", "score": 0, "kind": "LLM",
                   "identifier": "js-judge/correctness"},
                  {"form": "log", "name": "helpfulness", "label": "helpful", "score": 0.5, "explanation": "answers it"}]
        for _ in range(2):
            await _node_sends(stack.ports["otlp_http"], t.trace_id, t.reply.name, events)
        await wait_until(lambda: turn_evaluations(stack, inst, t.reply.turn_index), lambda e: len(e) == 3)
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)
        got = {e.aspect: e for e in await turn_evaluations(stack, inst, t.reply.turn_index)}
        assert set(got) == {"relevance", "correctness", "helpfulness"}
        rel, cor, hlp = got["relevance"], got["correctness"], got["helpfulness"]
        assert (rel.evaluator, rel.label, rel.score, rel.note, rel.version) == ("js-judge", "relevant", 0.75, "on topic", 1)
        assert (cor.evaluator, cor.label, cor.sentiment, cor.version) == (
            "js-judge/correctness", "incorrect", pb.RATING_SENTIMENT_NEGATIVE, 1)
        assert (hlp.evaluator, hlp.label, hlp.score, hlp.note, hlp.version) == ("js-judge", "helpful", 0.5, "answers it", 1)
        assert rel.author_kind == cor.author_kind == hlp.author_kind == pb.AUTHOR_KIND_LLM

        # Changed scores re-sent (the annotation, the log record), and the span event's evaluation as a
        # log record: the first two are new versions of the same ratings, the third the same rating unchanged.
        await _node_sends(stack.ports["otlp_http"], t.trace_id, t.reply.name,
                          [{**events[1], "label": "correct", "score": 1},
                           {**events[2], "label": "unhelpful", "score": 0.25},
                           {**events[0], "form": "log"}])
        got = await wait_until(lambda: turn_evaluations(stack, inst, t.reply.turn_index),
                               lambda e: sorted((x.aspect, x.version) for x in e) == [
                                   ("correctness", 2), ("helpfulness", 2), ("relevance", 1)])
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)
        by = {x.aspect: x for x in await turn_evaluations(stack, inst, t.reply.turn_index)}
        assert len(by) == 3 and by["correctness"].name == cor.name and by["helpfulness"].name == hlp.name
        assert (by["correctness"].label, by["correctness"].score) == ("correct", 1.0)
        assert (by["helpfulness"].label, by["helpfulness"].score) == ("unhelpful", 0.25)
        assert (by["relevance"].name, by["relevance"].version) == (rel.name, 1)
    finally:
        await stack.stop()
