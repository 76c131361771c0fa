"""Generated and malformed requests to every RPC of every service (issue 16), as one owner (alice), with
no token and with a forged one: never INTERNAL or UNKNOWN, every service SERVING afterwards, and the
other owner's (bob's) data exactly as before.

Bounded by default (`AGENTFEEDBACK_FUZZ_EXAMPLES` per RPC, default 6: a few hundred calls); the slow
test repeats it for up to `AGENTFEEDBACK_FUZZ_LONG_BUDGET_S` seconds (default 30). Each run fails
unless its calls went out (how many is printed and checked) and some RPCs answered OK.
"""
from __future__ import annotations

import asyncio
import os
import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfeedback.agent.v1 import agent_pb2
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.traces.v1 import traces_pb2
from tests.helpers.protogen import message
from tests.stack import start_stack

SERVICES = [(chat_pb2, "ChatService", "chat"), (pb, "FeedbackService", "feedback"),
            (traces_pb2, "TraceQueryService", "query"), (agent_pb2, "AgentService", "agent")]
METHODS = [(port, f"/{mod.DESCRIPTOR.package}.{svc}/{m.name}", m.input_type, m.server_streaming)
           for mod, svc, port in SERVICES for m in mod.DESCRIPTOR.services_by_name[svc].methods]
BAD_CODES = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
# Server streams that stay open until the client leaves (the change feed).
ENDLESS = frozenset({"/agentfeedback.feedback.v1.FeedbackService/WatchFeedback"})


async def _seed(s, sub: str) -> dict[str, str]:
    md = s.md(sub)
    inst = await s.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name=f"{sub}'s", agent="reference")), metadata=md)
    turn = await s.chat().SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="hello",
                                                                  request_id=str(uuid.uuid4())), metadata=md)
    fb = await s.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=turn.reply.name, body="wrong"), request_id=str(uuid.uuid4())), metadata=md)
    rating = await s.feedback().PutRating(pb.PutRatingRequest(rating=pb.Rating(
        conversation=inst.name, turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
        sentiment=pb.RATING_SENTIMENT_NEGATIVE), request_id=str(uuid.uuid4())), metadata=md)
    return {"instance": inst.name, "message": turn.reply.name, "user_message": turn.user_message.name,
            "trace_id": turn.trace_id, "feedback": fb.name, "rating": rating.name}


async def _owned(s, sub: str, names: dict[str, str]) -> list[bytes]:
    """Everything `sub` owns, serialized deterministically (after its report's capture settled)."""
    md = s.md(sub)
    fb = s.feedback()
    for _ in range(200):
        got = await fb.GetFeedback(pb.GetFeedbackRequest(name=names["feedback"]), metadata=md)
        if got.trace_snapshot.state != pb.TRACE_SNAPSHOT_STATE_PENDING:
            break
        await s.aflush_spans()
        await asyncio.sleep(0.1)
    out = [(await s.chat().ListInstances(chat_pb2.ListInstancesRequest(page_size=1000), metadata=md)),
           (await s.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=names["instance"], page_size=1000),
                                        metadata=md)),
           (await fb.ListFeedback(pb.ListFeedbackRequest(page_size=1000), metadata=md)),
           (await fb.ListRatings(pb.ListRatingsRequest(conversation=names["instance"], page_size=1000), metadata=md))]
    return [m.SerializeToString(deterministic=True) for m in out]


async def _call(s, channels, port: str, path: str, streaming: bool, body: bytes, md) -> grpc.StatusCode:
    ch = channels[port]
    try:
        if streaming:
            call = ch.unary_stream(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)
            stream = call(body, metadata=md, timeout=20)
            async for _ in stream:
                if path in ENDLESS:  # its first message says it is open; it never ends by itself
                    stream.cancel()
                    break
        else:
            call = ch.unary_unary(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)
            await call(body, metadata=md, timeout=20)
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as e:
        return e.code()


async def _fuzz(database_url, tmp_path, examples_per_rpc: int, budget_s: float | None = None,
                min_sent: int = 0, min_ok_rpcs: int = 1) -> None:
    """`examples_per_rpc` × every RPC, stopping early (the remaining examples do nothing) once
    `budget_s` seconds have passed. Fails unless every example was sent (with a budget: at least
    `min_sent`) and at least `min_ok_rpcs` RPCs answered OK at least once."""
    s = await start_stack(database_url, tmp_path, feedback={"write_quota_per_minute": 0},
                          chat={"write_quota_per_minute": 0})
    try:
        bob, alice = await _seed(s, "bob"), await _seed(s, "alice")
        before = await _owned(s, "bob", bob)
        pool = list(bob.values()) + list(alice.values())
        channels = {p: s.channel(p) for p in ("chat", "feedback", "query", "agent")}
        loop = asyncio.get_running_loop()
        requests = {i: message(desc, pool) for i, (_, _, desc, _) in enumerate(METHODS)}
        auth = st.sampled_from([s.md("alice")] * 6 + [(), (("authorization", "Bearer not.a.jwt"),),
                                                      (("authorization", "Basic " + "x" * 300),)])
        failures: list[str] = []
        seen: dict[str, int] = {}
        drawn: list[int] = []  # examples Hypothesis ran
        reached_ok: set[str] = set()  # RPCs that answered OK at least once
        end = None if budget_s is None else time.monotonic() + budget_s

        @settings(max_examples=examples_per_rpc * len(METHODS), deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def one(data) -> None:
            i = data.draw(st.integers(0, len(METHODS) - 1), label="method")
            port, path, _, streaming = METHODS[i]
            raw = data.draw(st.integers(0, 4), label="raw bytes") == 0  # 1 in 5: bytes that may not parse
            body = data.draw(st.binary(max_size=256)) if raw else data.draw(requests[i]).SerializeToString()
            md = data.draw(auth, label="metadata")
            drawn.append(1)
            if end is not None and time.monotonic() > end:
                return  # over the time budget: the remaining examples are drawn, not sent
            code = asyncio.run_coroutine_threadsafe(_call(s, channels, port, path, streaming, body, md), loop).result()
            if code == grpc.StatusCode.OK:
                reached_ok.add(path)
            key = f"{code.name} {path.rsplit('/', 1)[1]}" if code == grpc.StatusCode.UNIMPLEMENTED else code.name
            seen[key] = seen.get(key, 0) + 1
            if code in BAD_CODES:
                failures.append(f"{path} -> {code.name}")
            assert code not in BAD_CODES, f"{path} answered {code.name}"

        await asyncio.to_thread(one)
        sent = sum(seen.values())
        print(f"fuzz: {sent} calls sent of {len(drawn)} examples; status codes:", dict(sorted(seen.items())))
        print(f"fuzz: {len(reached_ok)} of {len(METHODS)} RPCs answered OK at least once")
        assert failures == []
        # The run exercised the services: every example was sent (within the budget, at least
        # `min_sent`), and generated requests got past validation into the RPCs' own work.
        assert sent >= (min_sent if budget_s is not None else examples_per_rpc * len(METHODS)), (sent, len(drawn))
        assert len(reached_ok) >= min_ok_rpcs, sorted(reached_ok)
        for port, ch in channels.items():
            got = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert got.status == health_pb2.HealthCheckResponse.SERVING, port
        assert await _owned(s, "bob", bob) == before, "the fuzzing owner changed another owner's data"
    finally:
        await s.stop()


async def test_every_rpc_of_every_service_survives_generated_and_malformed_requests(database_url, tmp_path):
    await _fuzz(database_url, tmp_path, int(os.environ.get("AGENTFEEDBACK_FUZZ_EXAMPLES", "6")), min_ok_rpcs=3)


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_every_rpc_long_run(database_url, tmp_path):
    """The long run, bounded in time so `make test` stays short: `AGENTFEEDBACK_FUZZ_LONG_EXAMPLES` per
    RPC (default 200) within `AGENTFEEDBACK_FUZZ_LONG_BUDGET_S` (default 30 s; raise both for a soak).
    At least 1,000 calls must go out within the budget (≈ 6,000 do on the 2-core machine) and 8 RPCs
    answer OK at least once (16 do), else the run proved nothing."""
    await _fuzz(database_url, tmp_path, int(os.environ.get("AGENTFEEDBACK_FUZZ_LONG_EXAMPLES", "200")),
                float(os.environ.get("AGENTFEEDBACK_FUZZ_LONG_BUDGET_S", "30")), min_sent=1000, min_ok_rpcs=8)
