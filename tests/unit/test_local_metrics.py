"""The hot path's per-call metrics kept in plain structures (`LocalCounter`, `LocalHistogram`): after a
known sequence of calls the Prometheus endpoint shows exactly what the OpenTelemetry SDK instruments
showed (names, units, labels, bucket bounds, counts, sums), and a delta reader gets the change."""
from __future__ import annotations

import time

from opentelemetry.sdk.metrics.export import AggregationTemporality

from services.common.metrics import RPC_BUCKETS_MS, LocalCounter, RpcMetrics, ServiceMetrics
from tests.helpers.scrape import scrape, value

RPC = "rpc_server_duration_milliseconds"
PUT = {"rpc_service": "agentfeedback.feedback.v1.FeedbackService", "rpc_method": "PutRating", "rpc_system": "grpc"}


async def test_counts_buckets_and_sums_scraped_after_known_calls():
    metrics = await ServiceMetrics("feedback", "127.0.0.1:0").start()
    try:
        rpc = RpcMetrics(metrics)
        turns = LocalCounter(metrics.meter, "agentfeedback.chat.turns", unit="{turn}", description="Turns.")
        durations_ms = [0.4, 1.0, 1.2, 2.5, 7.0, 70.0, 70000.0]  # 1.0 and 2.5 sit on bounds (le: inclusive)
        for ms in durations_ms:
            rpc.record("/agentfeedback.feedback.v1.FeedbackService/PutRating", 0, ms / 1000.0)
        for _ in range(3):
            rpc.record("/agentfeedback.feedback.v1.FeedbackService/PutRating", 5, 0.001)
        for outcome in ("OK", "OK", "AGENT_FAILED"):
            turns.add(1, {"outcome": outcome})
        got = await scrape(metrics.port)
    finally:
        await metrics.close()

    assert value(got, f"{RPC}_count", rpc_grpc_status_code="0", **PUT) == len(durations_ms)
    assert value(got, f"{RPC}_count", rpc_grpc_status_code="5", **PUT) == 3
    assert abs(value(got, f"{RPC}_sum", rpc_grpc_status_code="0", **PUT) - sum(durations_ms)) < 1e-6
    buckets = {le: value(got, f"{RPC}_bucket", le=le, rpc_grpc_status_code="0", **PUT)
               for le in [*(str(b) for b in RPC_BUCKETS_MS), "+Inf"]}
    assert buckets == {le: sum(1 for ms in durations_ms if le == "+Inf" or ms <= float(le)) for le in buckets}
    assert buckets["1"] == 2 and buckets["2.5"] == 4 and buckets["60000"] == 6 and buckets["+Inf"] == 7
    assert value(got, "agentfeedback_chat_turns_total", outcome="OK") == 2
    assert value(got, "agentfeedback_chat_turns_total", outcome="AGENT_FAILED") == 1
    scopes = {dict(ls)["otel_scope_name"] for (n, ls) in got if n.startswith((RPC, "agentfeedback_chat_turns"))}
    assert scopes == {"agentfeedback.feedback"}


def test_a_delta_reader_gets_the_change_since_its_last_collection():
    metrics = ServiceMetrics("x")
    hist = metrics.histogram("rpc.server.duration", "ms", "d", (1, 10))
    attrs = {"rpc.method": "M"}
    previous: dict = {}
    for ms in (0.5, 5.0):
        hist.record(ms, "M", attrs)
    first = hist.metric(time.time_ns(), previous)
    hist.record(20.0, "M", attrs)
    second = hist.metric(time.time_ns(), previous)
    cumulative = hist.metric(time.time_ns())
    assert first.data.aggregation_temporality == AggregationTemporality.DELTA
    (p1,), (p2,), (pc,) = first.data.data_points, second.data.data_points, cumulative.data.data_points
    assert (p1.count, list(p1.bucket_counts), p1.sum) == (2, [1, 1, 0], 5.5)
    assert (p2.count, list(p2.bucket_counts), p2.sum) == (1, [0, 0, 1], 20.0)
    assert p2.start_time_unix_nano == p1.time_unix_nano
    assert (pc.count, list(pc.bucket_counts), pc.sum, pc.min, pc.max) == (3, [1, 1, 1], 25.5, 0.5, 20.0)
    metrics.provider.shutdown()
