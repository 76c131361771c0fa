"""Evaluations that arrive as OTLP log records (issue 24): the OpenTelemetry GenAI `gen_ai.evaluation.result`
event emitted through the real OpenTelemetry Python SDK's Logs API (LoggerProvider + the OTLP/gRPC and
OTLP/HTTP log exporters, `event_name` set, in the evaluated span's context) to the real collector's
`LogsService/Export` and `POST /v1/logs`, kept in its outbox and handed over real gRPC to the feedback
service (real PostgreSQL throughout). Every other log record is answered OK and not stored. The JS SDK's
copy (OTLP/HTTP): tests/e2e/test_evaluations_js.py."""
from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import json
import uuid

import aiohttp
import asyncpg
import grpc
import pytest
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2

from services.chat import domain as chat_domain
from services.chat.repository import Repository as ChatRepository
from services.common.db import close_pool, create_pool
from services.common.errors import error_info
from services.tracecollector.logs import DISABLED
from tests.helpers.evaluations import gen_ai_event, gen_ai_log_event, judge, log_judge, outbox, turn_evaluations
from tests.helpers.feedback import new_instance, send, wait_until
from tests.helpers.otlp import grpc_retry_delay_s, kv
from tests.helpers.ports import closed_port
from tests.helpers.scrape import scrape, value
from tests.stack import start_stack

FAST = {"collector": {"evaluations_retry_first_s": 0.2, "evaluations_retry_max_s": 0.5, "evaluations_poll_s": 0.2}}
EVENT = "gen_ai.evaluation.result"


async def test_an_evaluation_event_as_a_log_record_becomes_one_llm_rating_over_grpc_and_http(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, **FAST)
    over_grpc = log_judge(stack.ports["otlp_grpc"], "grpc")
    over_http = log_judge(stack.ports["otlp_http"], "http")
    tp = judge(stack.ports["otlp_grpc"])
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        turn = t.reply.turn_index
        for _ in range(2):  # sent twice (an exporter retry, a pipeline re-run): still one rating each
            await gen_ai_log_event(over_grpc, t.trace_id, "relevance", label="relevant", score=0.9,
                                   explanation="on topic")
            await gen_ai_log_event(over_http, t.trace_id, "tone", label="polite", old_sdk=True)
        # An ordinary log line of the same service: answered OK, kept nowhere.
        await asyncio.to_thread(over_http.get_logger("app").emit, body="GET /health 200")
        await wait_until(lambda: turn_evaluations(stack, inst, turn), lambda e: len(e) == 2)
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)
        by = {e.aspect: e for e in await turn_evaluations(stack, inst, turn)}
        assert set(by) == {"relevance", "tone"}
        rel, tone = by["relevance"], by["tone"]
        assert (rel.author_kind, rel.evaluator, rel.label, rel.score, rel.note, rel.version) == (
            pb.AUTHOR_KIND_LLM, "llm-judge", "relevant", 0.9, "on topic", 1)
        assert (rel.conversation, rel.turn_index, rel.user) == (inst, turn, "alice")
        assert (tone.author_kind, tone.label, tone.sentiment) == (pb.AUTHOR_KIND_LLM, "polite", pb.RATING_SENTIMENT_UNSPECIFIED)

        # The same evaluation as a span event (the other form) is the same rating, unchanged.
        await gen_ai_event(tp, t.trace_id, "relevance", label="relevant", score=0.9, explanation="on topic")
        await wait_until(lambda: outbox(database_url), lambda rows: not rows)
        got = await turn_evaluations(stack, inst, turn)
        assert sorted((e.aspect, e.version) for e in got) == [("relevance", 1), ("tone", 1)]
        samples = await scrape(stack.metrics_port("collector"))
        assert value(samples, "otelcol_receiver_accepted_log_records_total", transport="grpc") >= 2
        assert value(samples, "otelcol_receiver_accepted_log_records_total", transport="http") >= 3
    finally:
        await asyncio.to_thread(over_grpc.shutdown)
        await asyncio.to_thread(over_http.shutdown)
        tp.shutdown()
        await stack.stop()


async def test_a_log_record_evaluation_of_an_unknown_trace_is_kept_and_linked_when_the_turn_appears(
        database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, **FAST)
    lp = log_judge(stack.ports["otlp_http"], "http")
    pool = await create_pool(database_url, "chat", 1, 2)
    try:
        inst = await new_instance(stack)
        trace_id = uuid.uuid4().hex  # a turn chat has not stored yet
        await gen_ai_log_event(lp, trace_id, "groundedness", label="fail")
        rows = await wait_until(lambda: outbox(database_url),
                                lambda r: len(r) == 1 and r[0]["last_outcome"] == "PENDING_TURN")
        assert rows[0]["attempts"] >= 1 and not await turn_evaluations(stack, inst, 0)
        turn = chat_domain.validate_turn(inst, "late turn", 1, "", "", "", 1000)
        await ChatRepository(pool).begin_turn("alice", turn, trace_id, uuid.uuid4().hex, dt.datetime.now(dt.UTC), 10)
        got = await wait_until(lambda: turn_evaluations(stack, inst, 0), lambda e: len(e) == 1)
        assert (got[0].aspect, got[0].label, got[0].author_kind, got[0].sentiment) == (
            "groundedness", "fail", pb.AUTHOR_KIND_LLM, pb.RATING_SENTIMENT_NEGATIVE)
        await wait_until(lambda: outbox(database_url), lambda r: not r)
    finally:
        await asyncio.to_thread(lp.shutdown)
        await close_pool(pool)
        await stack.stop()


def _records(*records: logs_pb2.LogRecord, namespace: str = "") -> logs_service_pb2.ExportLogsServiceRequest:
    res = [kv("service.name", "judge")] + ([kv("service.namespace", namespace)] if namespace else [])
    return logs_service_pb2.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        resource=resource_pb2.Resource(attributes=res), scope_logs=[logs_pb2.ScopeLogs(log_records=list(records))])])


def _evaluation(name: str, trace_id: bytes, **attrs) -> logs_pb2.LogRecord:
    return logs_pb2.LogRecord(event_name=EVENT, trace_id=trace_id, span_id=b"\x05" * 8, attributes=[
        kv("gen_ai.evaluation.name", name), *(kv(f"gen_ai.evaluation.{k}", v) for k, v in attrs.items())])


async def test_log_exports_answer_partial_success_for_unusable_events_and_ok_for_the_rest(start_collector):
    with closed_port() as dead:  # feedback unreachable: what is kept stays in the outbox
        c = await start_collector(feedback_target=f"127.0.0.1:{dead}", evaluations_poll_s=30)
        off = await start_collector()  # no feedback service configured
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.ports['otlp_grpc']}") as ch:
            stub = logs_service_pb2_grpc.LogsServiceStub(ch)
            assert not (await stub.Export(logs_service_pb2.ExportLogsServiceRequest())).HasField("partial_success")
            plain = logs_pb2.LogRecord(body=kv("", "GET / 200").value, trace_id=b"\x01" * 16)
            resp = await stub.Export(_records(plain, _evaluation("relevance", b"\x01" * 16, **{"score.value": 0.5})))
            assert not resp.HasField("partial_success")
            resp = await stub.Export(_records(
                _evaluation("a", b"", **{"score.label": "x"}), _evaluation("", b"\x02" * 16, **{"score.label": "x"}),
                _evaluation("b", b"\x02" * 16), _evaluation("c", b"\x03" * 16, **{"score.label": "ok"}), plain))
            assert resp.partial_success.rejected_log_records == 3
            msg = resp.partial_success.error_message
            assert "trace_id" in msg and "gen_ai.evaluation.name is missing" in msg and "score" in msg, msg
            # Our own namespace's events (what our feedback service emits) are neither kept nor rejected.
            resp = await stub.Export(_records(_evaluation("d", b"\x04" * 16, **{"score.value": 1.0}),
                                              namespace="agentfeedback"))
            assert not resp.HasField("partial_success")
        keys = await outbox(c.database_url)
        assert len(keys) == 2  # relevance and c; nothing of the plain records

        # OTLP/JSON over HTTP, gzip: hex ids, the event named by the older `event.name` attribute.
        doc = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "js"}}]},
                                 "scopeLogs": [{"logRecords": [
                                     {"traceId": "AB" * 16, "spanId": "cd" * 8, "attributes": [
                                         {"key": "event.name", "value": {"stringValue": EVENT}},
                                         {"key": "gen_ai.evaluation.name", "value": {"stringValue": "tone"}},
                                         {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": -1}}]},
                                     {"traceId": "not-hex", "eventName": EVENT, "attributes": [
                                         {"key": "gen_ai.evaluation.name", "value": {"stringValue": "x"}},
                                         {"key": "gen_ai.evaluation.score.label", "value": {"stringValue": "y"}}]},
                                     {"body": {"stringValue": "an app log line"}, "someFutureField": 1}]}]}]}
        url = f"http://127.0.0.1:{c.ports['otlp_http']}/v1/logs"
        async with aiohttp.ClientSession() as http:
            r = await http.post(url, data=gzip.compress(json.dumps(doc).encode()),
                                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
            assert r.status == 200, await r.text()
            body = await r.json()
            assert body["partialSuccess"]["rejectedLogRecords"] == "1", body
            r = await http.post(url, data=b"\xff\xff", headers={"Content-Type": "application/x-protobuf"})
            assert r.status == 400 and status_pb2.Status.FromString(await r.read()).code == 3
            r = await http.get(url)
            assert r.status == 405 and r.headers["Allow"] == "POST"
            # No feedback service: the events are refused (said why), the other records answered OK.
            r = await http.post(f"http://127.0.0.1:{off.ports['otlp_http']}/v1/logs", headers={
                "Content-Type": "application/x-protobuf"}, data=_records(
                    _evaluation("e", b"\x06" * 16, **{"score.value": 1.0}), plain).SerializeToString())
            ps = logs_service_pb2.ExportLogsServiceResponse.FromString(await r.read()).partial_success
            assert r.status == 200 and (ps.rejected_log_records, DISABLED in ps.error_message) == (1, True)
        assert len(await outbox(c.database_url)) == 3


async def test_log_exports_are_acknowledged_only_once_stored_and_unavailable_while_the_database_is_not(
        start_collector):
    with closed_port() as dead:
        c = await start_collector(feedback_target=f"127.0.0.1:{dead}", evaluations_poll_s=30,
                                  evaluations_queue_max=1, db_command_timeout_s=2.0, retry_after_s=3.0)
        url = f"http://127.0.0.1:{c.ports['otlp_http']}/v1/logs"
        blocker = await asyncpg.connect(c.database_url)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.ports['otlp_grpc']}") as ch:
            stub = logs_service_pb2_grpc.LogsServiceStub(ch)
            one = _records(_evaluation("relevance", b"\x01" * 16, **{"score.value": 0.5}))
            two = _records(_evaluation("tone", b"\x02" * 16, **{"score.label": "polite"}))
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute("LOCK TABLE traces.evaluation_outbox IN ACCESS EXCLUSIVE MODE")
            first = asyncio.ensure_future(stub.Export(one))
            await wait_until(lambda: _queued(c), lambda n: n == 1)
            # The bound: one evaluation is waiting for its commit, a second Export is told to come back.
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.Export(two)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE and grpc_retry_delay_s(e.value) == 3.0
            assert error_info(e.value).reason == "COLLECTOR_OVERLOADED"
            assert not first.done()  # not acknowledged before its commit
            await tx.rollback()
            assert not (await first).HasField("partial_success")
            assert len(await outbox(c.database_url)) == 1

            # PostgreSQL not answering (the outbox locked past the command timeout): UNAVAILABLE with
            # RetryInfo over gRPC, 503 + Retry-After over HTTP; nothing acknowledged, then the retry stores it.
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute("LOCK TABLE traces.evaluation_outbox IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.Export(two)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE and grpc_retry_delay_s(e.value) is not None
            assert error_info(e.value).reason == "DATABASE_UNAVAILABLE"
            async with aiohttp.ClientSession() as http:
                r = await http.post(url, data=two.SerializeToString(), headers={"Content-Type": "application/x-protobuf"})
                assert r.status == 503 and int(r.headers["Retry-After"]) >= 1
            await tx.rollback()
            assert not (await stub.Export(two)).HasField("partial_success")
        await blocker.close()
        assert len(await outbox(c.database_url)) == 2


async def _queued(c) -> int:
    return c.server.logs.queued
