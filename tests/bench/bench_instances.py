"""The Agents list at 100k instances (issue 28): `ListInstances` as the console calls it (page of 100,
`order_by = "last_activity_time desc"`), through the real chat gateway (its own process, gRPC on loopback,
one client), for one owner holding INSTANCES instances.

Data (SQL `generate_series`): the owner's INSTANCES instances created uniformly over the last 180 days,
one in three with a later turn (`last_turn_time`, two turns of messages each: the page's turn counts read
them), names "<word> <word> <n>" from a 40-word pool; one name in 1,000 holds the word "kestrel"
(RARE: ≈ 100 matches at 100k); OTHER_OWNERS more owners with INSTANCES / 10 instances between them.
Measured (REPS calls each after WARMUP, alternating blocks of service and floor, ms):
- `instances_activity_*`: the first page, latest activity first, no search;
- `instances_search_rare_*`: search "kestrel" (≈ 0.1 % of the names; answered from the trigram index
  instances_name_trgm, chat migration 0045);
- `instances_search_none_*`: search "zzqx", which no name holds (the walk of instances_activity would read
  every one of the owner's rows; the trigram index reads none).
Each has p50 and p99 (REPS ≥ 1,000: tests/bench/stats.py) and the floor, same run: the same statement
(services/chat/repository.py LIST_INSTANCES_BY_ACTIVITY, the same custom-plan transaction,
`fetch_custom_plan`) run directly from this process on its own asyncpg pool: no gRPC, auth, page token,
spans or protobuf. `_vs_floor` = p50 / floor p50. `instances_search_uses_trgm`: 1 when PostgreSQL plans
the rare search with instances_name_trgm (0 at smoke sizes may be right: a tiny table is scanned).
Baseline, what the index buys: `instances_search_{rare,none}_walk_*`, the same statement with
instances_name_trgm dropped (inside a transaction rolled back after; as before migration 0045), WALK_REPS
calls each (a `_max_`, not a p99: each reads the owner's 100k rows).
"""
from __future__ import annotations

import statistics
import time

import asyncpg
import grpc
from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc

from services.chat.repository import LIST_INSTANCES_BY_ACTIVITY
from services.common.auth import mint_token
from services.common.db import fetch_custom_plan, like_pattern
from tests.bench.bench_chat import SECRET, service_env, start_services, stop_services
from tests.bench.stats import tail

INSTANCES = 100_000
OTHER_OWNERS = 1_000
REPS = 1_000
WARMUP = 30
ROUNDS = 2  # alternating service / floor blocks of REPS / ROUNDS calls each
WALK_REPS = 100
PAGE = 100  # the console's page (console/src/pages/agents.ts)
SMOKE = {"INSTANCES": 2_000, "OTHER_OWNERS": 10, "REPS": 4, "WARMUP": 1, "WALK_REPS": 2}
OWNER = "bench"
RARE, NONE = "kestrel", "zzqx"
ORDER = "last_activity_time desc"

_WORDS = ("support billing research travel coding writing sales triage onboarding reports finance legal "
          "marketing design ops security data hiring tutor planner helper scout digest review notes "
          "calendar inbox docs release deploy metrics alerts budget study recipes garden fitness music "
          "photos news").split()
# Instances [$2, $3) of owner $1 (or of OTHER_OWNERS owners when $4): names from _WORDS, one in 1,000
# holding RARE; created over 180 days, one in three with a turn since (last_turn_time).
SEED_INSTANCES = f"""
WITH g AS (SELECT i, (hashint4(i)::bigint & 2147483647) AS h FROM generate_series($2::int, $3::int - 1) i)
INSERT INTO instances (owner, id, display_name, agent, create_time, next_turn_index, last_turn_time)
SELECT CASE WHEN $4 THEN 'other-' || (g.h % $5::int) ELSE $1 END, 'b' || g.i,
    (ARRAY[{",".join(f"'{w}'" for w in _WORDS)}])[1 + g.h % {len(_WORDS)}] || ' '
        || CASE WHEN g.i % 1000 = 7 THEN '{RARE}' ELSE (ARRAY[{",".join(f"'{w}'" for w in _WORDS)}])[1 + (g.h / 64) % {len(_WORDS)}] END
        || ' ' || g.i,
    'reference', c.t, CASE WHEN g.h % 3 = 0 THEN 2 ELSE 0 END,
    CASE WHEN g.h % 3 = 0 THEN c.t + make_interval(secs => ((g.h / 3) % 86400)::float8) END
FROM g, LATERAL (SELECT now() - make_interval(secs => (g.h % (180 * 86400))::float8) - interval '1 day' AS t) c
"""
# Two turns (a user message and a reply each) for every instance with a turn.
SEED_MESSAGES = """
INSERT INTO messages (owner, instance_id, id, role, content, trace_id, turn_index, create_time)
SELECT i.owner, i.id, i.id || '-' || k, 1 + k % 2, 'message ' || k, md5(i.id || (k / 2)), k / 2,
    i.last_turn_time - make_interval(secs => (3 - k)::float8)
FROM instances i, generate_series(0, 3) k WHERE i.last_turn_time IS NOT NULL
"""


async def _seed(url: str) -> float:
    """The instances and their messages, indexes built after the load; seconds taken."""
    t0 = time.perf_counter()
    conn = await asyncpg.connect(url, server_settings={"search_path": "chat", "maintenance_work_mem": "256MB"})
    try:
        await conn.execute(SEED_INSTANCES, OWNER, 0, INSTANCES, False, 1)
        await conn.execute(SEED_INSTANCES, OWNER, INSTANCES, INSTANCES + INSTANCES // 10, True, OTHER_OWNERS)
        await conn.execute(SEED_MESSAGES)
        await conn.execute("VACUUM ANALYZE chat.instances")
        await conn.execute("VACUUM ANALYZE chat.messages")
    finally:
        await conn.close()
    return time.perf_counter() - t0


async def _uses_trgm(pool: asyncpg.Pool) -> bool:
    """Whether the rare search's custom plan reads instances_name_trgm."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        plan = await conn.fetch("EXPLAIN " + LIST_INSTANCES_BY_ACTIVITY, OWNER, None, None, PAGE + 1, like_pattern(RARE))
    return any("instances_name_trgm" in r[0] for r in plan)


async def _walk(pool: asyncpg.Pool, search: str) -> list[float]:
    """Latencies (ms) of the search's statement without instances_name_trgm (dropped, then rolled back)."""
    lat: list[float] = []
    async with pool.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        try:
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            await conn.execute("DROP INDEX chat.instances_name_trgm")
            for i in range(WARMUP + WALK_REPS):
                t0 = time.perf_counter()
                await conn.fetch(LIST_INSTANCES_BY_ACTIVITY, OWNER, None, None, PAGE + 1, like_pattern(search))
                if i >= WARMUP:
                    lat.append((time.perf_counter() - t0) * 1000)
        finally:
            await tr.rollback()  # the index is back
    return lat


async def _block(call, n: int, into: list[float]) -> None:
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        into.append((time.perf_counter() - t0) * 1000)


async def run(ctx) -> dict[str, float]:
    url = await ctx.new_database()
    env, ports = service_env(ctx, url)
    procs = await start_services(env, ports, ["collector", "agent", "chat"])  # chat applies its migrations
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{ports['chat']}")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1, server_settings={"search_path": "chat"})
    out: dict[str, float] = {"instances_seed_s": await _seed(url)}
    try:
        stub = chat_pb2_grpc.ChatServiceStub(ch)
        md = (("authorization", f"Bearer {mint_token(SECRET, OWNER)}"),)
        cases = {"activity": "", "search_rare": RARE, "search_none": NONE}
        for name, search in cases.items():
            pattern = like_pattern(search)

            async def service(search=search):
                return await stub.ListInstances(chat_pb2.ListInstancesRequest(
                    page_size=PAGE, search=search, order_by=ORDER), metadata=md)

            async def floor(pattern=pattern):  # the repository's statement: limit = page + 1 (services/common/pages.py)
                return await fetch_custom_plan(pool, LIST_INSTANCES_BY_ACTIVITY, OWNER, None, None, PAGE + 1, pattern)

            got, rows = (await service()).instances, await floor()
            want = {"activity": PAGE, "search_none": 0}.get(name)
            if [i.name.removeprefix("instances/") for i in got] != [r["id"] for r in rows[:PAGE]] or (
                    want is not None and len(got) != want) or (name == "search_rare" and not got):
                raise AssertionError(f"{name}: the service's page ({len(got)}) is not the statement's ({len(rows)})")
            for _ in range(WARMUP):
                await service()
                await floor()
            lat: list[float] = []
            base: list[float] = []
            for _ in range(ROUNDS):
                await _block(service, REPS // ROUNDS, lat)
                await _block(floor, REPS // ROUNDS, base)
            out[f"instances_{name}_p50_ms"] = statistics.median(lat)
            out |= tail(f"instances_{name}", lat)
            out[f"instances_{name}_floor_p50_ms"] = statistics.median(base)
            out |= tail(f"instances_{name}_floor", base)
            out[f"instances_{name}_vs_floor"] = out[f"instances_{name}_p50_ms"] / out[f"instances_{name}_floor_p50_ms"]
        out["instances_search_uses_trgm"] = float(await _uses_trgm(pool))
        for name, search in (("search_rare", RARE), ("search_none", NONE)):
            lat = await _walk(pool, search)
            out[f"instances_{name}_walk_p50_ms"] = statistics.median(lat)
            out |= tail(f"instances_{name}_walk", lat)
    finally:
        await pool.close()
        await ch.close()
        await stop_services(procs)
    return out
