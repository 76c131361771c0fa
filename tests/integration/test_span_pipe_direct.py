"""A rating put's `feedback.evaluation` carrier span and its SERVER span, queued by `span_pipe.record_span`
and `span_pipe.start_span` directly (the service's provider pipes its spans through the export child
alone) or made by the SDK, reach the collector as the same OTLP: the service's real export child and exporter send it, the real collector
takes it and forwards the request it received to a receiver here, and every field of the span, its
resource and its scope compare equal but the ids and times, which keep their relations (the put's
trace, the put's SERVER span as parent, within its times)."""
from __future__ import annotations

import asyncio
import time

import grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from services.common import span_pipe
from services.common.telemetry import setup_tracing
from services.feedback.evaluation_events import CARRIER_SPAN
from services.feedback.server import create_server as create_feedback
from services.feedback.settings import FeedbackSettings
from tests.helpers.feedback import new_instance, rid, send
from tests.helpers.otlp import bare_span, start_downstream
from tests.stack import TEST_JWT_SECRET, start_stack


async def test_a_puts_carrier_span_reaches_the_collector_the_same_queued_directly_or_by_the_sdk(
        database_url, tmp_path, monkeypatch):
    down, receiver, port = await start_downstream()
    stack = await start_stack(database_url, tmp_path, collector={"forward_endpoint": f"127.0.0.1:{port}"})
    # A feedback service as deployed: its spans leave through the export child, to the stack's collector.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{stack.ports['otlp_grpc']}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "AGENTFEEDBACK_SPAN_EXPORT"):
        monkeypatch.delenv(name, raising=False)
    tp = setup_tracing("feedback")
    assert span_pipe._direct_processor(tp.get_tracer("agentfeedback.feedback")) is not None
    chat = grpc.aio.insecure_channel(f"127.0.0.1:{stack.ports['chat']}")
    settings = FeedbackSettings(listen="127.0.0.1:0", metrics_listen="127.0.0.1:0", chat_target="127.0.0.1:0",
                                traces_target=f"127.0.0.1:{stack.ports['query']}", database_url=database_url,
                                data_dir=tmp_path / "piped", jwt_secret=TEST_JWT_SECRET, shutdown_grace_s=0.5,
                                shutdown_drain_s=0.0, tracker_markdown_dir=str(tmp_path / "piped-tickets"))
    server = await create_feedback(settings, database_url=database_url, tracer_provider=tp, run_worker=False,
                                   chat_channel=chat)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        fb = feedback_pb2_grpc.FeedbackServiceStub(channel)
        # Each sentiment once each way (a put that changes nothing writes no rating, so they alternate).
        puts = [(True, pb.RATING_SENTIMENT_NEGATIVE), (False, pb.RATING_SENTIMENT_POSITIVE),
                (False, pb.RATING_SENTIMENT_NEGATIVE), (True, pb.RATING_SENTIMENT_POSITIVE)]
        traces = []
        for i, (direct, sentiment) in enumerate(puts):
            monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
            trace_id, client_span = f"{i + 1:032x}", f"{i + 1:016x}"
            await fb.PutRating(pb.PutRatingRequest(rating=pb.Rating(
                conversation=inst, turn_index=t.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="accuracy",
                sentiment=sentiment), request_id=rid()),
                metadata=(*stack.md(), ("traceparent", f"00-{trace_id}-{client_span}-01")))
            traces.append((trace_id, client_span))
        deadline = time.monotonic() + 20
        wanted = {bytes.fromhex(tid) for tid, _ in traces}
        while len({s.trace_id for _r, _s, s in down.received if s.name == CARRIER_SPAN} & wanted) < 4:
            assert time.monotonic() < deadline, [s.name for s in down.spans]
            await asyncio.sleep(0.2)
    finally:
        await channel.close()
        await server.stop(0.5)
        await asyncio.to_thread(tp.shutdown)
        await stack.stop()
        await receiver.stop(0)

    carriers, rpcs = [], []
    for trace_id, client_span in traces:
        in_trace = [(r, sc, s) for r, sc, s in down.received if s.trace_id.hex() == trace_id]
        (carrier,) = [x for x in in_trace if x[2].name == CARRIER_SPAN]
        ((*rpc_scope, rpc),) = [x for x in in_trace if x[2].kind == trace_pb2.Span.SPAN_KIND_SERVER]
        span = carrier[2]
        assert rpc.parent_span_id.hex() == client_span and span.parent_span_id == rpc.span_id
        assert len(span.span_id) == 8 and span.span_id not in (rpc.span_id, b"\0" * 8)
        assert rpc.start_time_unix_nano <= span.start_time_unix_nano <= span.events[0].time_unix_nano
        assert span.events[0].time_unix_nano <= span.end_time_unix_nano <= rpc.end_time_unix_nano
        assert span.links[0].trace_id.hex() == t.trace_id
        carriers.append(carrier)
        rpcs.append((*rpc_scope, rpc))
    # Same sentiment, one put direct, one by the SDK: every field equal but ids and times.
    for spans in (carriers, rpcs):
        for direct, sdk in ((spans[0], spans[2]), (spans[3], spans[1])):
            assert bare_span(direct[2]) == bare_span(sdk[2]), (direct[2], sdk[2])
            assert direct[0] == sdk[0] and direct[1] == sdk[1]  # resource and scope, schema urls included
    assert rpcs[0][2].name == "agentfeedback.feedback.v1.FeedbackService/PutRating"
    assert carriers[0][1].scope.name == "agentfeedback.feedback"
    assert carriers[0][2].flags == carriers[2][2].flags != 0  # the W3C flags the encoder writes
