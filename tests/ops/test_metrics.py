"""Each service's Prometheus endpoint, scraped as Prometheus would, and each metric moving as traffic
flows: RPC durations by method and status code, pool usage, turns by outcome, reports by author,
ratings written, capture backlog, the collector's accepted / refused spans (equal to what the test
exported), queue size / capacity, commit latency, retention runs and dropped days, forwarder sent /
failed."""
from __future__ import annotations

import asyncio
import os
import time
import uuid

import asyncpg
import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from tests.helpers.scrape import names, scrape, value
from tests.stack import Stack, start_stack

RPC = "rpc_server_duration_milliseconds_count"


def spans(n: int, bad: int = 0) -> trace_service_pb2.ExportTraceServiceRequest:
    """`n` valid spans of one new trace and `bad` invalid ones (zero trace id)."""
    now, tid = time.time_ns(), os.urandom(16)
    ok = [trace_pb2.Span(trace_id=tid, span_id=os.urandom(8), name="m", start_time_unix_nano=now - 10,
                         end_time_unix_nano=now) for _ in range(n)]
    ko = [trace_pb2.Span(trace_id=bytes(16), span_id=os.urandom(8), name="bad", start_time_unix_nano=now - 10,
                         end_time_unix_nano=now) for _ in range(bad)]
    return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        scope_spans=[trace_pb2.ScopeSpans(spans=ok + ko)])])


async def _pending(stack: Stack) -> int:
    """Reports whose trace snapshot is PENDING, counted in the feedback database itself."""
    conn = await asyncpg.connect(stack.database_url)
    try:
        return await conn.fetchval("SELECT count(*) FROM feedback.feedback WHERE trace_state = $1",
                                   pb.TRACE_SNAPSHOT_STATE_PENDING)
    finally:
        await conn.close()


async def test_chat_agent_and_feedback_metrics_move_with_calls(stack: Stack):
    ports = {n: stack.metrics_port(n) for n in ("chat", "agent", "feedback")}
    assert all(ports.values()), ports
    before = {n: await scrape(p) for n, p in ports.items()}
    md = stack.md()
    chat, fb = stack.chat(), stack.feedback()
    inst = (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="m", agent="reference")), metadata=md)).name
    turn = await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content="hi", request_id=str(uuid.uuid4())),
                                  metadata=md)
    try:
        await chat.GetInstance(chat_pb2.GetInstanceRequest(name="instances/nope"), metadata=md)
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND
    rid = str(uuid.uuid4())
    for _ in range(2):  # a retry stores nothing more, so it counts nothing more
        await fb.CreateFeedback(pb.CreateFeedbackRequest(feedback=pb.Feedback(message=turn.reply.name, body="m"),
                                                         request_id=rid), metadata=md)
    rating = pb.Rating(conversation=inst, turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE,
                       aspect="reaction", sentiment=pb.RATING_SENTIMENT_POSITIVE)
    await fb.PutRating(pb.PutRatingRequest(rating=rating, request_id=str(uuid.uuid4())), metadata=md)
    await stack.servers["feedback"].metrics_refresh()
    after = {n: await scrape(p) for n, p in ports.items()}

    def delta(svc: str, name: str, **labels: str) -> float:
        return value(after[svc], name, **labels) - value(before[svc], name, missing=0, **labels)

    assert delta("chat", RPC, rpc_method="CreateInstance", rpc_grpc_status_code="0") == 1
    assert delta("chat", RPC, rpc_method="SendMessage", rpc_grpc_status_code="0") == 1
    assert delta("chat", RPC, rpc_method="GetInstance", rpc_grpc_status_code="5") == 1
    assert delta("chat", "agentfeedback_chat_turns_total", outcome="OK") == 1
    assert delta("agent", RPC, rpc_service="agentfeedback.agent.v1.AgentService", rpc_method="Think",
                 rpc_grpc_status_code="0") == 1
    assert delta("feedback", RPC, rpc_method="CreateFeedback", rpc_grpc_status_code="0") == 2
    created = {dict(ls).get("author"): v for (n, ls), v in after["feedback"].items()
               if n == "agentfeedback_feedback_reports_created_total"}
    assert delta("feedback", "agentfeedback_feedback_reports_created_total", author="USER") == 1, created
    assert delta("feedback", "agentfeedback_feedback_ratings_written_total", scope="MESSAGE") == 1
    # The backlog gauge is the count of PENDING reports: equal to the table's count read around the
    # refresh whenever the worker did not change it meanwhile (retried until a read is not straddled).
    for _ in range(5):
        pending_before = await _pending(stack)
        await stack.servers["feedback"].metrics_refresh()
        backlog = value(await scrape(ports["feedback"]), "agentfeedback_feedback_capture_backlog")
        if pending_before == await _pending(stack):
            break
    assert backlog == pending_before
    assert "agentfeedback_feedback_capture_oldest_pending_age_seconds" in names(after["feedback"])
    for svc, pool in (("chat", "chat"), ("feedback", "feedback")):
        assert value(after[svc], "db_client_connections_max", pool_name=pool) == 10
        used = value(after[svc], "db_client_connections_usage", pool_name=pool, state="used")
        idle = value(after[svc], "db_client_connections_usage", pool_name=pool, state="idle")
        assert used + idle >= 1 and used >= 0
    # Histogram buckets exist with the method labels (what the dashboard's latency panels read).
    assert value(after["chat"], "rpc_server_duration_milliseconds_bucket", rpc_method="SendMessage", le="+Inf") >= 1


async def test_collector_counts_exactly_the_spans_exported_and_refused(stack: Stack):
    port = stack.metrics_port("collector")
    await stack.aflush_spans()
    await asyncio.sleep(0.3)
    before = await scrape(port)
    otlp = trace_service_pb2_grpc.TraceServiceStub(stack.channel("otlp_grpc"))
    await otlp.Export(spans(7, bad=2))
    await otlp.Export(spans(5))
    async with __import__("httpx").AsyncClient() as http:
        r = await http.post(f"http://127.0.0.1:{stack.ports['otlp_http']}/v1/traces", content=spans(3).SerializeToString(),
                            headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 200
    after = await scrape(port)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, missing=0, **labels)

    assert delta("otelcol_receiver_accepted_spans_total", receiver="otlp", transport="grpc") == 12
    assert delta("otelcol_receiver_refused_spans_total", receiver="otlp", transport="grpc") == 2
    assert delta("otelcol_receiver_accepted_spans_total", transport="http") == 3
    assert delta("otelcol_exporter_sent_spans_total", exporter="postgresql") == 15
    assert delta("agentfeedback_collector_commit_duration_seconds_count") >= 1
    assert value(after, "otelcol_exporter_queue_capacity", exporter="postgresql") == 200_000
    assert value(after, "otelcol_exporter_queue_size", exporter="postgresql") == 0
    assert value(after, "db_client_connections_max", pool_name="traces") >= 1

    retention = stack.servers["collector"].retention
    await retention.run_once()
    await retention.run_once(time.time_ns() + 40 * 86_400 * 10**9)  # 40 days on: every kept day expires
    later = await scrape(port)
    assert value(later, "agentfeedback_collector_retention_runs_total", result="ok") - \
        value(after, "agentfeedback_collector_retention_runs_total", missing=0, result="ok") == 2
    assert value(later, "agentfeedback_collector_retention_dropped_days_total") - \
        value(after, "agentfeedback_collector_retention_dropped_days_total", missing=0) >= 1


async def test_forwarder_counts_spans_sent_and_dropped(database_url, tmp_path):
    """A collector forwarding to a live downstream (the stack's own) and one forwarding to nothing."""
    down = await start_stack(database_url, tmp_path / "down")
    live = await start_stack(database_url, tmp_path / "live", collector={
        "forward_endpoint": f"http://127.0.0.1:{down.ports['otlp_grpc']}", "forward_max_attempts": 1})
    dead = await start_stack(database_url, tmp_path / "dead", collector={
        "forward_endpoint": "http://127.0.0.1:1", "forward_max_attempts": 1, "forward_timeout_s": 0.5})
    try:
        for s, n in ((live, 4), (dead, 6)):
            await trace_service_pb2_grpc.TraceServiceStub(s.channel("otlp_grpc")).Export(spans(n))
        deadline = time.monotonic() + 10
        while True:
            got_live = await scrape(live.metrics_port("collector"))
            got_dead = await scrape(dead.metrics_port("collector"))
            sent = value(got_live, "otelcol_exporter_sent_spans_total", missing=0, exporter="otlp_forward")
            failed = value(got_dead, "otelcol_exporter_send_failed_spans_total", missing=0, exporter="otlp_forward")
            if (sent, failed) == (4, 6) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert (sent, failed) == (4, 6)
        assert value(got_live, "otelcol_exporter_sent_spans_total", exporter="otlp_forward") == 4
        assert value(got_live, "otelcol_exporter_queue_capacity", exporter="otlp_forward") > 0
        assert value(got_live, "otelcol_exporter_queue_size", exporter="otlp_forward") == 0
    finally:
        for s in (dead, live, down):
            await s.stop()


async def test_chat_turn_removal_gauges_show_what_the_feedback_service_has_not_acknowledged(stack: Stack):
    """An operator sees a turn removal the feedback service has not acknowledged (its ratings are still
    listed meanwhile): the chat outbox's backlog and the oldest row's age, read from the table itself."""
    port = stack.metrics_port("chat")
    chat = stack.servers["chat"]
    conn = await asyncpg.connect(stack.database_url)
    try:
        # A row no relay claims during the test (due in an hour), created ten minutes ago.
        rid = await conn.fetchval(
            "INSERT INTO chat.turn_removals (owner, instance_id, turn_indexes, trace_ids, create_time, next_attempt) "
            "VALUES ('gauge-test', 'none', '{1}', '{}', now() - interval '10 minutes', now() + interval '1 hour') "
            "RETURNING id")
        try:
            await chat.metrics_refresh()
            got = await scrape(port)
            assert value(got, "agentfeedback_chat_turn_removal_backlog") >= 1
            assert 600 <= value(got, "agentfeedback_chat_turn_removal_oldest_pending_age_seconds") < 700
        finally:
            await conn.execute("DELETE FROM chat.turn_removals WHERE id = $1", rid)
        await chat.metrics_refresh()
        got = await scrape(port)
        assert value(got, "agentfeedback_chat_turn_removal_backlog") == await conn.fetchval(
            "SELECT count(*) FROM chat.turn_removals")
        assert value(got, "agentfeedback_chat_turn_removal_oldest_pending_age_seconds") < 600
    finally:
        await conn.close()
