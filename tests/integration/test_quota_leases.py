"""The per-owner write quota leases tokens from PostgreSQL (services/common/quota.py, GCRA): replicas
never grant more than the burst together, one replica grants exactly the burst, a fast writer is
refused at most one lease per other replica early, and a refused owner's next write fits one emission
interval later (no window edge: nothing here depends on the wall clock's minute)."""
from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from services.common.db import close_pool, create_pool, migrate
from services.common.errors import ResourceExhausted
from services.common.quota import MIGRATIONS, SCHEMA, WriteQuota

# A period far longer than a test, so no token is earned back during one (an emission interval of
# WINDOW_S / limit is days).
WINDOW_S = 10_000_000


@pytest.fixture
async def pool(database_url: str):
    await migrate(database_url, SCHEMA, MIGRATIONS)
    p = await create_pool(database_url, "public", min_size=1, max_size=4)
    try:
        yield p
    finally:
        await close_pool(p)


async def _accepted(quota: WriteQuota, owner: str) -> bool:
    try:
        await quota.take(owner)
        return True
    except ResourceExhausted:
        return False


async def _used(pool: asyncpg.Pool, quota: WriteQuota, owner: str) -> int:
    """Tokens granted to `owner` so far: how far its theoretical arrival time is ahead of now, in
    emission intervals (no token is earned back within a test)."""
    row = await pool.fetchrow("SELECT tat - extract(epoch FROM clock_timestamp())::float8 AS ahead"
                              " FROM quota.write_tat WHERE scope = $1 AND owner = $2", quota.scope, owner)
    return 0 if row is None else round(row["ahead"] / quota.interval_s)


async def test_two_replicas_writing_fast_never_grant_more_than_the_limit(pool):
    a, b = WriteQuota(pool, "svc", 64, WINDOW_S), WriteQuota(pool, "svc", 64, WINDOW_S)
    assert a.lease_cap == 4
    accepted = [await _accepted(a if i % 2 else b, "fast") for i in range(100)]
    # Every refusal comes after the burst is spent, and the leased-but-unspent tokens of the other
    # replica (one lease at most) are all that is lost.
    assert 64 - a.lease_cap <= sum(accepted) <= 64
    assert accepted[: 64 - a.lease_cap] == [True] * (64 - a.lease_cap)
    assert await _used(pool, a, "fast") == 64
    assert not any(accepted[70:])


async def test_one_replica_grants_exactly_the_limit(pool):
    quota = WriteQuota(pool, "svc", 240, WINDOW_S)
    assert quota.lease_cap == 15
    assert [await _accepted(quota, "one") for _ in range(241)] == [True] * 240 + [False]
    assert await _used(pool, quota, "one") == 240


async def test_concurrent_writes_of_one_owner_on_one_replica_lose_no_grant(pool):
    """Eight clients of one owner writing at once on one replica (a flood): each lease taken while
    another was in flight adds up, so the replica accepts exactly the limit."""
    quota = WriteQuota(pool, "svc", 240, WINDOW_S)
    results: list[bool] = []

    async def client() -> None:
        for _ in range(40):
            results.append(await _accepted(quota, "flood8"))

    await asyncio.gather(*(client() for _ in range(8)))
    assert sum(results) == 240 and len(results) == 320
    assert await _used(pool, quota, "flood8") == 240


async def test_a_full_window_refuses_on_every_replica_and_other_owners_still_write(pool):
    replicas = [WriteQuota(pool, "svc", 20, WINDOW_S) for _ in range(3)]
    accepted = sum([await _accepted(replicas[i % 3], "flood") for i in range(60)])
    assert accepted == 20  # lease cap 1 at this limit: exact
    assert all([not await _accepted(r, "flood") for r in replicas])
    assert await _accepted(replicas[0], "quiet")


async def test_a_burst_of_one_owner_on_one_replica_leaves_the_window_to_the_others(pool):
    """An owner writing fast (its lease grown to the cap) bursts 60 writes at once on one replica, then
    writes on a second replica: 75 + 10 writes of a 240 limit are all accepted. (Each writer of the
    burst used to request a whole lease of its own: the window filled with one replica's unspent
    tokens, refusing writers of both replicas long before the limit.)"""
    a, b = WriteQuota(pool, "svc", 240, WINDOW_S), WriteQuota(pool, "svc", 240, WINDOW_S)
    assert [await _accepted(a, "burst") for _ in range(15)] == [True] * 15  # leases of 1, 2, 4, 8
    burst = await asyncio.gather(*(_accepted(a, "burst") for _ in range(60)))
    assert all(burst)
    assert [await _accepted(b, "burst") for _ in range(10)] == [True] * 10
    assert await _used(pool, a, "burst") <= 85 + 2 * a.lease_cap  # at most one unspent lease per replica


async def test_a_flooder_gets_the_rate_evenly_not_a_whole_window_at_once(pool):
    """After its burst, an owner writing as fast as it can gets one write per emission interval, on
    every replica, however the wall clock's minutes fall: 5 writes a second at 300 a minute with a burst
    of 5, never a new minute's worth at once (a fixed window let 240 through in the first second of
    every minute, issue 25). The refusal's RetryInfo says when the next write fits."""
    replicas = [WriteQuota(pool, "svc", 300, 60, burst=5) for _ in range(2)]
    assert replicas[0].interval_s == pytest.approx(0.2)
    assert [await _accepted(replicas[i % 2], "steady") for i in range(5)] == [True] * 5
    with pytest.raises(ResourceExhausted) as ei:
        await replicas[0].take("steady")
    assert 0 < ei.value.retry_after_s <= 0.2 + 0.05
    # Flood for 1.5 s from both replicas: accepted ≈ 1.5 s / 0.2 s, whatever second of the minute it is.
    accepted, end = 0, time.monotonic() + 1.5
    while time.monotonic() < end:
        accepted += await _accepted(replicas[accepted % 2], "steady")
        await asyncio.sleep(0.01)
    assert 5 <= accepted <= 1.5 / 0.2 + 2  # at most one interval's rounding and one unspent lease


async def test_a_refused_owner_writes_again_one_interval_later(pool):
    quota = WriteQuota(pool, "svc", 600, 60, burst=2)  # one write per 0.1 s
    assert [await _accepted(quota, "waits") for _ in range(3)] == [True, True, False]
    with pytest.raises(ResourceExhausted) as ei:
        await quota.take("waits")
    await asyncio.sleep(ei.value.retry_after_s + 0.02)  # waiting what RetryInfo says is what a client does
    assert await _accepted(quota, "waits")
