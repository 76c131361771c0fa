"""Feedback service benchmarks (issue 3): CreateFeedback latency including the snapshot fetch from the
real chat service (loopback, 1 client, 1000 sequential calls) and PutRating throughput (4 concurrent
clients, MESSAGE scope, so every put also checks the turn at the chat service).

Figures: feedback_create_p50_ms, feedback_create_p99_ms, rating_put_per_s.
Targets on the 2-core machine: p99 ≤ 15 ms, ≥ 2,000 ratings/s.
Everything else of the stack (collector, agent, capture worker, span export) runs as in production.
"""
from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from tests.stack import start_stack

CREATE_CALLS = 1000
WARMUP = 50
RATING_CLIENTS = 4
RATINGS_PER_CLIENT = 750


def _pct(sorted_ms: list[float], p: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(round(p / 100 * (len(sorted_ms) - 1))))]


async def run(ctx) -> dict[str, float]:
    stack = await start_stack(await ctx.new_database(), ctx.tmp / f"feedback-{uuid.uuid4().hex[:6]}")
    try:
        md = stack.md("bench")
        chat, fb = stack.chat(), stack.feedback()
        inst = (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="bench", agent="reference")), metadata=md)).name
        turns = [await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content=f"question {i}",
                                                                    request_id=str(uuid.uuid4())), metadata=md)
                 for i in range(RATING_CLIENTS)]
        target = turns[0].reply.name

        async def create() -> float:
            req = pb.CreateFeedbackRequest(feedback=pb.Feedback(message=target, body="the reply is wrong",
                                                                sentiment=pb.SENTIMENT_BAD),
                                           request_id=str(uuid.uuid4()))
            t0 = time.perf_counter()
            await fb.CreateFeedback(req, metadata=md)
            return (time.perf_counter() - t0) * 1000

        for _ in range(WARMUP):
            await create()
        lat = sorted([await create() for _ in range(CREATE_CALLS)])

        async def rater(c: int) -> None:
            turn = turns[c].reply.turn_index
            for i in range(RATINGS_PER_CLIENT):
                sentiment = pb.RATING_SENTIMENT_POSITIVE if i % 2 else pb.RATING_SENTIMENT_NEGATIVE
                await fb.PutRating(pb.PutRatingRequest(rating=pb.Rating(
                    conversation=inst, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
                    sentiment=sentiment), request_id=str(uuid.uuid4())), metadata=md)

        await asyncio.gather(*(rater(c) for c in range(RATING_CLIENTS)))  # warm-up pass, same shape
        t0 = time.perf_counter()
        await asyncio.gather(*(rater(c) for c in range(RATING_CLIENTS)))
        elapsed = time.perf_counter() - t0
        return {
            "feedback_create_p50_ms": round(statistics.median(lat), 3),
            "feedback_create_p99_ms": round(_pct(lat, 99), 3),
            "rating_put_per_s": round(RATING_CLIENTS * RATINGS_PER_CLIENT / elapsed, 1),
        }
    finally:
        await stack.stop()
