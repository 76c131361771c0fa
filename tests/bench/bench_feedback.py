"""Feedback service benchmarks (issue 3): CreateFeedback latency including the snapshot fetch from the
real chat service (loopback, 1 client, 1000 sequential calls) and PutRating throughput (4 concurrent
clients, each on its own connection, MESSAGE scope), each next to its floor.

Deployment shape as in docs/architecture.md "Processes": the feedback service, the chat gateway, the agent and the
collector each run as their own OS process (their real `main()`, as bench_chat starts them); this
process is only the client. (Until 2026-11-30 chat, agent and collector ran in-process here, next to
the client: the collector's ingest of each 512-span export batch and the bench process's full GC of
that whole stack then stalled the chat calls CreateFeedback waits for by 20–40 ms, several times a
run — the p99 measured the bench's own loop, not the services.)
Figures: feedback_create_p50_ms, feedback_create_p99_ms, rating_put_per_s (each client re-rates one
turn: after the first put the ownership check is served from its 5 s cache), and the first ratings of
FIRST_RATING_TURNS distinct turns, each rated once by the same 4 clients, so every put asks the chat
service whether the caller owns the turn (`rating_first_put_per_s`, `rating_first_put_p50_ms`, its
tail); also the chat service's
own GetMessage and ListMessages(turn_of_message) p50/p99 over the same loopback
(`feedback_chat_getmessage_*`, `feedback_chat_listturn_*`: the latter is the create's one chat call).
The create's floor, same run: the create's one durable write (INSERT_FEEDBACK, one statement, one
commit, quoting the same turns' real text) behind tests.bench.floor, alternating with the service in ROUNDS blocks of creates
(`feedback_create_floor_p50_ms`, `feedback_create_floor_p99_ms`); a create is that write after the
chat read, so its floor is about their sum.
Also the feedback process's own CPU per call (`*_server_cpu_ms`, from /proc: independent of what
else the shared machine runs), a create's next to the floor server's (`feedback_create_floor_server_cpu_ms`)
and the chat process's per create (`feedback_create_chat_cpu_ms`, its turn read) and the 1-minute load average at the end.
Floor, same run: the same 4 clients against `tests.bench.floor` (the real UPSERT_RATING statement behind
a bare grpc.aio server, none of our features), alternating with the service in ROUNDS rounds:
`rating_put_floor_per_s`, and `rating_put_vs_floor` = service / floor.
Targets on the 2-core machine: p99 ≤ 15 ms, ≥ 2,000 ratings/s.
"""
from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import uuid

import grpc

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from agentfeedback.traces.v1 import traces_pb2_grpc
from services.common.auth import mint_token
from tests.bench.bench_chat import SECRET, poll_trace, service_env, start_services, stop_services
from tests.bench.floor import FLOOR_TURNS_ENV, start_floor
from tests.bench.stats import tail

CREATE_CALLS = 1000  # and as many against the floor, alternating in ROUNDS blocks
CHAT_READS = 1000  # each chat read of the baseline (≥ 1000: a p99)
WARMUP = 100
TURNS = 20
RATING_CLIENTS = 4
RATINGS_PER_CLIENT = 200  # a round's puts per client
ROUNDS = 10  # alternating service / floor rounds of RATING_CLIENTS × RATINGS_PER_CLIENT puts (and of creates)
FIRST_RATING_TURNS = 1000  # distinct turns, each rated once: the ownership check is never cached
# RATINGS_PER_CLIENT stays even: each client alternates sentiments, and the floor answers only puts that change a row.
SMOKE = {"CREATE_CALLS": 4, "CHAT_READS": 4, "WARMUP": 1, "TURNS": 4, "RATINGS_PER_CLIENT": 4, "FIRST_RATING_TURNS": 8,
         "ROUNDS": 2}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far (/proc/<pid>/stat, clock ticks)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _others_cpu_s(collector_pid: int) -> dict[str, float]:
    """CPU seconds so far of what else a rating costs on this machine: this client process, the
    collector process, and each PostgreSQL process (comm `postgres`), keyed `postgres:<pid>` (a
    backend that exits between two readings must not count as negative time: `_cpu_delta`)."""
    return {"client": _cpu_s(os.getpid()), "collector": _cpu_s(collector_pid), **postgres_cpu_s()}


def postgres_cpu_s() -> dict[str, float]:
    """CPU seconds so far of each PostgreSQL process (comm `postgres`), keyed `postgres:<pid>`."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() == "postgres":
                        out[f"postgres:{d}"] = _cpu_s(int(d))
            except OSError:  # exited meanwhile
                pass
    return out


def postgres_cpu_delta(before: dict[str, float], after: dict[str, float]) -> float:
    """PostgreSQL CPU seconds between two `postgres_cpu_s` readings (a process started meanwhile counts
    whole; a reused pid is never negative)."""
    return sum(max(0.0, v - before.get(k, 0.0)) for k, v in after.items() if k.startswith("postgres:"))


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds used between two `_others_cpu_s` readings: client, collector, postgres (the processes
    alive at the second reading; one started meanwhile counts whole)."""
    return {"client": after["client"] - before["client"], "collector": after["collector"] - before["collector"],
            "postgres": postgres_cpu_delta(before, after)}


def rating_clients(port: int, n: int, channels: list[grpc.aio.Channel]) -> list[feedback_pb2_grpc.FeedbackServiceStub]:
    """`n` FeedbackService stubs to 127.0.0.1:`port`, each on its own connection (a client pool per
    channel, as separate clients have); their channels are added to `channels` for the caller to close."""
    chs = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
           for _ in range(n)]
    channels.extend(chs)
    return [feedback_pb2_grpc.FeedbackServiceStub(ch) for ch in chs]


async def _wait_trace(query: traces_pb2_grpc.TraceQueryServiceStub, md, trace_id: str, min_spans: int) -> None:
    """Poll the collector until the trace has `min_spans` spans (60 s at most)."""
    await poll_trace(query, md, trace_id, lambda tr: len(tr.spans) >= min_spans, time.monotonic() + 60)


async def _first_ratings(chat, raters, inst: str, md) -> tuple[float, list[float]]:
    """FIRST_RATING_TURNS new turns of `inst`, then each rated once, the turns dealt round-robin to the
    raters (concurrent): (puts per second, each put's latency in ms)."""
    turns = [(await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content=f"to rate {i}",
                                                                 request_id=str(uuid.uuid4())), metadata=md)
              ).reply.turn_index for i in range(FIRST_RATING_TURNS)]
    lat: list[float] = []

    async def rater(stub, mine: list[int]) -> None:
        for turn_index in mine:
            t0 = time.perf_counter()
            await stub.PutRating(pb.PutRatingRequest(rating=pb.Rating(
                conversation=inst, turn_index=turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="first",
                sentiment=pb.RATING_SENTIMENT_POSITIVE), request_id=str(uuid.uuid4())), metadata=md)
            lat.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(rater(stub, turns[c::len(raters)]) for c, stub in enumerate(raters)))
    return len(turns) / (time.perf_counter() - t0), lat


async def run(ctx) -> dict[str, float]:
    env, ports = service_env(ctx, await ctx.new_database())
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{ports[n]}") for n in ("chat", "feedback", "query")]
    procs = []
    try:
        procs = await start_services(env, ports, ["collector", "agent", "chat", "feedback"])
        proc = procs[-1]
        md = (("authorization", f"Bearer {mint_token(SECRET, 'bench')}"),)
        chat = chat_pb2_grpc.ChatServiceStub(channels[0])
        fb = feedback_pb2_grpc.FeedbackServiceStub(channels[1])
        query = traces_pb2_grpc.TraceQueryServiceStub(channels[2])
        inst = (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="bench", agent="reference")), metadata=md)).name
        turns = [await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content=f"question {i}",
                                                                    request_id=str(uuid.uuid4())), metadata=md)
                 for i in range(TURNS)]
        for t in turns:  # every turn's spans are at the collector before the clock starts
            await _wait_trace(query, md, t.trace_id, min_spans=3)

        async def timed(call) -> float:
            t0 = time.perf_counter()
            await call
            return (time.perf_counter() - t0) * 1000

        def create(stub, i: int):
            return stub.CreateFeedback(pb.CreateFeedbackRequest(
                feedback=pb.Feedback(message=turns[i % TURNS].reply.name, body="the reply is wrong",
                                     sentiment=pb.SENTIMENT_BAD), request_id=str(uuid.uuid4())), metadata=md)

        get_msg = chat_pb2.GetMessageRequest(name=turns[0].reply.name)
        base = sorted([await timed(chat.GetMessage(get_msg, metadata=md)) for _ in range(CHAT_READS)])
        # What the create itself asks the chat service for: the turn of the quoted message.
        list_turn = chat_pb2.ListMessagesRequest(parent=inst, page_size=100, turn_of_message=turns[0].reply.name)
        turn_read = sorted([await timed(chat.ListMessages(list_turn, metadata=md)) for _ in range(CHAT_READS)])
        # The floor's rows quote the same turns as the service's (the same trigram index work per insert).
        floor_turns = ctx.tmp / "floor_turns.json"
        floor_turns.write_text(json.dumps({t.reply.name: [t.reply.content, t.user_message.content] for t in turns}))
        floor, floor_port = await start_floor("feedback", env["AGENTFEEDBACK_DATABASE_URL"],
                                              env={FLOOR_TURNS_ENV: str(floor_turns)})
        procs.append(floor)  # stopped with the services
        channels.append(grpc.aio.insecure_channel(f"127.0.0.1:{floor_port}"))
        floor_fb = feedback_pb2_grpc.FeedbackServiceStub(channels[-1])
        for i in range(WARMUP):
            await create(fb, i)
            await create(floor_fb, i)
        # Service and floor alternate (ROUNDS blocks each), so both see the same machine and disk.
        lat: list[float] = []
        floor_lat: list[float] = []
        create_cpu_s = create_chat_cpu_s = create_floor_cpu_s = 0.0
        chat_proc = procs[2]  # collector, agent, chat, feedback
        for _ in range(ROUNDS):
            cpu0, chat_cpu0 = _cpu_s(proc.pid), _cpu_s(chat_proc.pid)
            lat += [await timed(create(fb, i)) for i in range(CREATE_CALLS // ROUNDS)]
            create_cpu_s += _cpu_s(proc.pid) - cpu0
            create_chat_cpu_s += _cpu_s(chat_proc.pid) - chat_cpu0
            floor_cpu0 = _cpu_s(floor.pid)
            floor_lat += [await timed(create(floor_fb, i)) for i in range(CREATE_CALLS // ROUNDS)]
            create_floor_cpu_s += _cpu_s(floor.pid) - floor_cpu0
        lat.sort()
        floor_lat.sort()
        create_cpu_ms = create_cpu_s * 1000 / len(lat)

        def client_stubs(port: int) -> list[feedback_pb2_grpc.FeedbackServiceStub]:
            return rating_clients(port, RATING_CLIENTS, channels)

        async def rater(stub, c: int, n: int) -> None:
            turn = turns[c].reply.turn_index
            for i in range(n):
                sentiment = pb.RATING_SENTIMENT_POSITIVE if i % 2 else pb.RATING_SENTIMENT_NEGATIVE
                await stub.PutRating(pb.PutRatingRequest(rating=pb.Rating(
                    conversation=inst, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
                    sentiment=sentiment), request_id=str(uuid.uuid4())), metadata=md)

        async def rate(stubs, n: int) -> float:
            """Seconds for RATING_CLIENTS concurrent clients to put `n` ratings each."""
            t0 = time.perf_counter()
            await asyncio.gather(*(rater(stubs[c], c, n) for c in range(RATING_CLIENTS)))
            return time.perf_counter() - t0

        raters, floor_raters = client_stubs(ports["feedback"]), client_stubs(floor_port)
        await rate(raters, 100)
        await rate(floor_raters, 100)
        # Service and floor alternate (ROUNDS each), so both see the same machine.
        elapsed = floor_elapsed = cpu_s = floor_cpu_s = 0.0
        others = {"client": 0.0, "collector": 0.0, "postgres": 0.0}
        by_round: list[float] = []  # each round's service rate over the floor's right after it
        for _ in range(ROUNDS):
            cpu0, others0 = _cpu_s(proc.pid), _others_cpu_s(procs[0].pid)
            took = await rate(raters, RATINGS_PER_CLIENT)
            elapsed += took
            cpu_s += _cpu_s(proc.pid) - cpu0
            for k, v in _cpu_delta(others0, _others_cpu_s(procs[0].pid)).items():
                others[k] += v
            floor_cpu0 = _cpu_s(floor.pid)
            floor_took = await rate(floor_raters, RATINGS_PER_CLIENT)
            floor_elapsed += floor_took
            floor_cpu_s += _cpu_s(floor.pid) - floor_cpu0
            by_round.append(floor_took / took)
        by_round.sort()
        first_per_s, first_ms = await _first_ratings(chat, raters, inst, md)
        puts = ROUNDS * RATING_CLIENTS * RATINGS_PER_CLIENT
        rating_cpu_ms = cpu_s * 1000 / puts
        others = {k: v * 1000 / puts for k, v in others.items()}
        rate_per_s, floor_per_s = puts / elapsed, puts / floor_elapsed
        return {
            "feedback_create_p50_ms": round(statistics.median(lat), 3),
            **{k: round(v, 3) for k, v in tail("feedback_create", lat).items()},
            # The create's floor, same run: its durable INSERT + commit alone behind bare grpc.aio
            # (tests/bench/floor.py); a create adds the chat read below (sequential) to it.
            "feedback_create_floor_p50_ms": round(statistics.median(floor_lat), 3),
            **{k: round(v, 3) for k, v in tail("feedback_create_floor", floor_lat).items()},
            "feedback_chat_getmessage_p50_ms": round(statistics.median(base), 3),
            **{k: round(v, 3) for k, v in tail("feedback_chat_getmessage", base).items()},
            "feedback_chat_listturn_p50_ms": round(statistics.median(turn_read), 3),
            **{k: round(v, 3) for k, v in tail("feedback_chat_listturn", turn_read).items()},
            "rating_put_per_s": round(rate_per_s, 1),
            # The same puts against the floor (tests/bench/floor.py: the UPSERT alone behind bare grpc.aio).
            "rating_put_floor_per_s": round(floor_per_s, 1),
            "rating_put_vs_floor": round(rate_per_s / floor_per_s, 3),
            # The same per round (a service block against the floor block after it): how far one block's
            # figure moves on the machine that ran it (read the headline against it).
            "rating_put_vs_floor_round_median": round(statistics.median(by_round), 3),
            "rating_put_vs_floor_round_min": round(by_round[0], 3),
            "rating_put_vs_floor_round_max": round(by_round[-1], 3),
            # First ratings of distinct turns (no cached ownership check: one chat call per put).
            "rating_first_put_per_s": round(first_per_s, 1),
            "rating_first_put_p50_ms": round(statistics.median(first_ms), 3),
            **{k: round(v, 3) for k, v in tail("rating_first_put", first_ms).items()},
            # Load-independent: CPU the feedback process spent per call (the machine is shared).
            "feedback_create_server_cpu_ms": round(create_cpu_ms, 3),
            # Its baselines, measured the same way: the floor server's CPU per create (the INSERT alone) and
            # the chat process's per create (the turn read the create makes).
            "feedback_create_floor_server_cpu_ms": round(create_floor_cpu_s * 1000 / len(floor_lat), 3),
            "feedback_create_chat_cpu_ms": round(create_chat_cpu_s * 1000 / len(lat), 3),
            "rating_put_server_cpu_ms": round(rating_cpu_ms, 3),
            # The floor server's own CPU per put, measured the same way: what the server CPU above is
            # compared with (the difference is the feedback process's own per-put work).
            "rating_put_floor_server_cpu_ms": round(floor_cpu_s * 1000 / puts, 3),
            # The rest of the 2-core machine's CPU per rating (what bounds the throughput with the server).
            **{f"rating_put_{k}_cpu_ms": round(v, 3) for k, v in others.items()},
            "feedback_bench_loadavg_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        for ch in channels:
            await ch.close()
        await stop_services(procs)
