"""The per-owner write quota leases tokens from PostgreSQL (services/common/quota.py): replicas never
grant more than the limit together, one replica grants exactly the limit, and a fast writer is refused
at most one lease per other replica early."""
from __future__ import annotations

import asyncpg
import pytest

from services.common.db import close_pool, create_pool, migrate
from services.common.errors import ResourceExhausted
from services.common.quota import MIGRATIONS, SCHEMA, WriteQuota


# A window far longer than a test, so no window boundary falls inside one (a new window resets the count).
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


async def _used(pool: asyncpg.Pool, owner: str) -> int:
    return await pool.fetchval("SELECT coalesce(sum(used), 0) FROM quota.write_windows WHERE owner = $1", owner)


async def test_two_replicas_writing_fast_never_grant_more_than_the_limit(pool):
    a, b = WriteQuota(pool, "svc", 64, WINDOW_S), WriteQuota(pool, "svc", 64, WINDOW_S)
    assert a.lease_cap == 4
    accepted = [await _accepted(a if i % 2 else b, "fast") for i in range(100)]
    # Every refusal comes after the window is full, and the leased-but-unspent tokens of the other
    # replica (one lease at most) are all that is lost.
    assert 64 - a.lease_cap <= sum(accepted) <= 64
    assert accepted[: 64 - a.lease_cap] == [True] * (64 - a.lease_cap)
    assert await _used(pool, "fast") == 64
    assert not any(accepted[70:])


async def test_one_replica_grants_exactly_the_limit(pool):
    quota = WriteQuota(pool, "svc", 240, WINDOW_S)
    assert quota.lease_cap == 15
    assert [await _accepted(quota, "one") for _ in range(241)] == [True] * 240 + [False]
    assert await _used(pool, "one") == 240


async def test_concurrent_writes_of_one_owner_on_one_replica_lose_no_grant(pool):
    """Eight clients of one owner writing at once on one replica (a flood): each lease taken while
    another was in flight adds up, so the replica accepts exactly the limit."""
    import asyncio  # noqa: PLC0415

    quota = WriteQuota(pool, "svc", 240, WINDOW_S)
    results: list[bool] = []

    async def client() -> None:
        for _ in range(40):
            results.append(await _accepted(quota, "flood8"))

    await asyncio.gather(*(client() for _ in range(8)))
    assert sum(results) == 240 and len(results) == 320
    assert await _used(pool, "flood8") == 240


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
    import asyncio  # noqa: PLC0415

    a, b = WriteQuota(pool, "svc", 240, WINDOW_S), WriteQuota(pool, "svc", 240, WINDOW_S)
    assert [await _accepted(a, "burst") for _ in range(15)] == [True] * 15  # leases of 1, 2, 4, 8
    burst = await asyncio.gather(*(_accepted(a, "burst") for _ in range(60)))
    assert all(burst)
    assert [await _accepted(b, "burst") for _ in range(10)] == [True] * 10
    assert await _used(pool, "burst") <= 85 + 2 * a.lease_cap  # at most one unspent lease per replica
