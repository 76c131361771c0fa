"""Change feed benchmarks (issue 24): end-to-end latency from a rating's commit to its WatchFeedback
subscribers with 1 and with SUBSCRIBERS streams, and what the outbox costs PutRating.

Deployment shape as bench_feedback: collector, agent, chat gateway and feedback service each run as their
own OS process; this process is the writer and the subscribers (admin streams, ratings only).
- `feed_latency_{1,N}_subscribers_{p50,p99}_ms`: each of WRITES_ONE (WRITES_MANY) ratings, written one at a time
  GAP_S apart, is timed from its transaction time (the event's `change_time`, taken at the transaction's
  start, so at or before the commit) to its arrival at each subscriber (same machine, same clock). The
  path: commit → the service's NOTIFY after the RPC → each replica's LISTEN → one page read per stream →
  gRPC.
- `rating_put_outbox_ratio`: PutRating throughput (RATING_CLIENTS concurrent clients) with the outbox
  triggers on, over the same puts with them off (`ALTER TABLE ratings DISABLE TRIGGER`: today's put
  without the feed), alternating in ROUNDS rounds. Target ≥ 0.95. The NOTIFY after each write runs in
  both (it is off the RPC's path: a coalesced statement on another connection).
"""
from __future__ import annotations

import asyncio
import datetime as dt
import os
import statistics
import time
import uuid

import asyncpg
import grpc
from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc

from services.common.auth import mint_token
from tests.bench.bench_chat import SECRET, service_env, start_services, stop_services
from tests.bench.stats import tail

SUBSCRIBERS = 100
WRITES_ONE = 1000  # one subscriber: 1000 samples (a p99)
WRITES_MANY = 100  # SUBSCRIBERS subscribers: 10,000 samples
GAP_S = 0.01
RATING_CLIENTS = 4
RATINGS_PER_CLIENT = 500
ROUNDS = 2
SMOKE = {"SUBSCRIBERS": 3, "WRITES_ONE": 4, "WRITES_MANY": 4, "RATINGS_PER_CLIENT": 4, "ROUNDS": 1}
TRIGGERS = ("ratings_feed", "ratings_feed_change")


async def _latencies(fb, inst: str, turn: int, md, admin_md, n_subscribers: int, writes: int) -> list[float]:
    """Milliseconds from each write's transaction time to its arrival, over every subscriber."""
    ready = asyncio.Event()
    opened = 0
    got: list[float] = []

    async def subscriber() -> None:
        nonlocal opened
        call = fb.WatchFeedback(pb.WatchFeedbackRequest(kind=pb.FEEDBACK_EVENT_KIND_RATING), metadata=admin_md)
        try:
            await call.read()  # the opening heartbeat
            opened += 1
            if opened == n_subscribers:
                ready.set()
            seen = 0
            while True:
                m = await call.read()
                if m.HasField("event"):
                    now = dt.datetime.now(dt.UTC)
                    got.append((now - m.event.change_time.ToDatetime(dt.UTC)).total_seconds() * 1000)
                    seen += 1
                    if seen == writes:
                        return
        finally:
            call.cancel()

    tasks = [asyncio.ensure_future(subscriber()) for _ in range(n_subscribers)]
    await asyncio.wait_for(ready.wait(), 60)
    for i in range(writes):
        await fb.PutRating(pb.PutRatingRequest(rating=pb.Rating(
            conversation=inst, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect="latency", note=f"write {i}"),
            request_id=str(uuid.uuid4())), metadata=md)
        await asyncio.sleep(GAP_S)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return got


async def run(ctx) -> dict[str, float]:
    db = await ctx.new_database()
    env, ports = service_env(ctx, db)
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{ports[n]}") for n in ("chat", "feedback")]
    procs = []
    try:
        procs = await start_services(env, ports, ["collector", "agent", "chat", "feedback"])
        md = (("authorization", f"Bearer {mint_token(SECRET, 'bench')}"),)
        admin_md = (("authorization", f"Bearer {mint_token(SECRET, 'ops', ('feedback:admin',))}"),)
        chat = chat_pb2_grpc.ChatServiceStub(channels[0])
        fb = feedback_pb2_grpc.FeedbackServiceStub(channels[1])
        inst = (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="bench", agent="reference")), metadata=md)).name
        turns = [(await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content=f"q {i}",
                                                                      request_id=str(uuid.uuid4())), metadata=md)
                  ).reply.turn_index for i in range(RATING_CLIENTS + 1)]
        one = await _latencies(fb, inst, turns[0], md, admin_md, 1, WRITES_ONE)
        many = await _latencies(fb, inst, turns[0], md, admin_md, SUBSCRIBERS, WRITES_MANY)

        stubs = []
        for _ in range(RATING_CLIENTS):
            ch = grpc.aio.insecure_channel(f"127.0.0.1:{ports['feedback']}", options=[("grpc.use_local_subchannel_pool", 1)])
            channels.append(ch)
            stubs.append(feedback_pb2_grpc.FeedbackServiceStub(ch))

        async def rater(stub, c: int, n: int) -> None:
            for i in range(n):
                sentiment = pb.RATING_SENTIMENT_POSITIVE if i % 2 else pb.RATING_SENTIMENT_NEGATIVE
                await stub.PutRating(pb.PutRatingRequest(rating=pb.Rating(
                    conversation=inst, turn_index=turns[c + 1], scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
                    sentiment=sentiment), request_id=str(uuid.uuid4())), metadata=md)

        async def rate(n: int) -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(rater(stubs[c], c, n) for c in range(RATING_CLIENTS)))
            return time.perf_counter() - t0

        conn = await asyncpg.connect(db, server_settings={"search_path": "feedback"})
        await rate(50)  # warm: the ownership checks are cached, the plans made
        on = off = 0.0
        try:
            for _ in range(ROUNDS):
                on += await rate(RATINGS_PER_CLIENT)
                for t in TRIGGERS:
                    await conn.execute(f"ALTER TABLE ratings DISABLE TRIGGER {t}")
                off += await rate(RATINGS_PER_CLIENT)
                for t in TRIGGERS:
                    await conn.execute(f"ALTER TABLE ratings ENABLE TRIGGER {t}")
        finally:
            for t in TRIGGERS:
                await conn.execute(f"ALTER TABLE ratings ENABLE TRIGGER {t}")
            await conn.close()
        puts = ROUNDS * RATING_CLIENTS * RATINGS_PER_CLIENT
        return {
            "feed_latency_1_subscriber_p50_ms": round(statistics.median(one), 3),
            **{k: round(v, 3) for k, v in tail("feed_latency_1_subscriber", one).items()},
            f"feed_latency_{SUBSCRIBERS}_subscribers_p50_ms": round(statistics.median(many), 3),
            **{k: round(v, 3) for k, v in tail(f"feed_latency_{SUBSCRIBERS}_subscribers", many).items()},
            "rating_put_with_outbox_per_s": round(puts / on, 1),
            "rating_put_without_outbox_per_s": round(puts / off, 1),
            "rating_put_outbox_ratio": round(off / on, 3),
            "feed_bench_loadavg_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        for ch in channels:
            await ch.close()
        await stop_services(procs)
