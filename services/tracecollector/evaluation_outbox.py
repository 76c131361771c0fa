"""The evaluation outbox (issue 24, migration 0010): all its SQL and the store.

`put` runs while an Export is handled, before it is acknowledged: an acknowledged evaluation is in
PostgreSQL even when the feedback service is down. `claim` hands due rows to one delivery worker under a
lease (`FOR UPDATE SKIP LOCKED`: replicas share the table, none holds a row while calling feedback);
`done` and `later` act only on the version claimed, so a newer payload that arrived meanwhile is
delivered too.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

# Last payload per key wins (callers pass one row per key: ON CONFLICT cannot touch a row twice).
PUT = """
INSERT INTO traces.evaluation_outbox AS o (key, payload)
SELECT * FROM unnest($1::text[], $2::bytea[])
ON CONFLICT (key) DO UPDATE SET payload = EXCLUDED.payload, version = o.version + 1, update_time = now(),
    next_attempt = now(), attempts = 0, lease_until = NULL
WHERE o.payload IS DISTINCT FROM EXCLUDED.payload
"""
CLAIM = """
UPDATE traces.evaluation_outbox o SET lease_until = now() + make_interval(secs => $2), attempts = o.attempts + 1
WHERE o.key IN (SELECT key FROM traces.evaluation_outbox
                WHERE next_attempt <= now() AND (lease_until IS NULL OR lease_until < now())
                ORDER BY next_attempt LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING o.key, o.payload, o.version, o.attempts, o.receive_time
"""
DONE = """
DELETE FROM traces.evaluation_outbox o USING unnest($1::text[], $2::bigint[]) AS d (key, version)
WHERE o.key = d.key AND o.version = d.version
"""
LATER = """
UPDATE traces.evaluation_outbox o SET next_attempt = now() + make_interval(secs => d.delay), lease_until = NULL,
    last_outcome = $4
FROM unnest($1::text[], $2::bigint[], $3::float8[]) AS d (key, version, delay)
WHERE o.key = d.key AND o.version = d.version
"""
EXPIRE = "DELETE FROM traces.evaluation_outbox WHERE receive_time < now() - make_interval(days => $1)"
NEXT_DUE = "SELECT min(next_attempt) FROM traces.evaluation_outbox"
COUNT = "SELECT count(*) FROM traces.evaluation_outbox"


@dataclass(frozen=True, slots=True)
class Claimed:
    key: str
    payload: bytes
    version: int
    attempts: int
    receive_time: datetime


class OutboxStore:
    def __init__(self, pool: asyncpg.Pool):
        self._pool = pool

    async def put(self, rows: Sequence[tuple[str, bytes]]) -> None:
        """Store (key, payload) rows; committed when this returns, else raises."""
        async with self._pool.acquire() as conn:
            await conn.execute(PUT, [k for k, _ in rows], [p for _, p in rows])

    async def claim(self, limit: int, lease_s: float) -> list[Claimed]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(CLAIM, limit, lease_s)
        return [Claimed(r["key"], bytes(r["payload"]), r["version"], r["attempts"], r["receive_time"]) for r in rows]

    async def done(self, rows: Sequence[Claimed]) -> None:
        if rows:
            async with self._pool.acquire() as conn:
                await conn.execute(DONE, [r.key for r in rows], [r.version for r in rows])

    async def later(self, rows: Sequence[tuple[Claimed, float]], outcome: str) -> None:
        """Due again after each row's delay (seconds), with `outcome` recorded."""
        if rows:
            async with self._pool.acquire() as conn:
                await conn.execute(LATER, [r.key for r, _ in rows], [r.version for r, _ in rows],
                                   [d for _, d in rows], outcome)

    async def expire(self, days: int) -> int:
        """Drop rows first received more than `days` ago; how many."""
        async with self._pool.acquire() as conn:
            status = await conn.execute(EXPIRE, days)
        return int(status.split()[-1])

    async def next_due(self) -> datetime | None:
        async with self._pool.acquire() as conn:
            return await conn.fetchval(NEXT_DUE)

    async def count(self) -> int:
        async with self._pool.acquire() as conn:
            return await conn.fetchval(COUNT)
