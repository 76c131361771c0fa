"""The request ledger (AIP-155): one table per schema, one record shape, one prune policy, for every
idempotent mutation whose result is not a row that outlives it (an update, a delete, a put, a copy).

A record is (owner, method, request id) → the resource it acted on and the request's fingerprint
(`ids.request_fingerprint`; no content). The table, in each service's migrations:

    CREATE TABLE request_ledger (owner text, method text, request_id uuid, resource text NOT NULL DEFAULT '',
        fingerprint bytea, create_time timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (owner, method, request_id));
    CREATE INDEX request_ledger_time ON request_ledger (create_time);

Prune policy (one, for every method): a record lives RETENTION_S (24 h). A lookup ignores an older
record (and `Ledger.record` replaces it); `PRUNE` deletes them, run every PRUNE_INTERVAL_S by the service's
background loop. Statements that must claim a request id atomically with their write use the
`prior_cte` / `claim_cte` (or `record_cte`) fragments (NamedSQL parameters `:owner`, `:ledger_method`, `:request_id`,
`:fingerprint`, `:retention_s`); the others use `Ledger.get` / `Ledger.record` inside their transaction.

Creates keep their request id on the row they create instead (chat: `instances`, `turns`; feedback:
`feedback_create_requests`, which also outlives a deleted report): the row is the record.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.common.db import NamedSQL

RETENTION_S = 24 * 3600.0
PRUNE_INTERVAL_S = 3600.0

_LIVE = "create_time > now() - make_interval(secs => :retention_s)"

GET_ENTRY = NamedSQL(f"""
SELECT resource, fingerprint FROM request_ledger
WHERE owner = :owner AND method = :ledger_method AND request_id = :request_id AND {_LIVE}""")

RECORD_ENTRY = NamedSQL("""
INSERT INTO request_ledger AS l (owner, method, request_id, resource, fingerprint, create_time)
VALUES (:owner, :ledger_method, :request_id, :resource, :fingerprint, now())
ON CONFLICT (owner, method, request_id) DO UPDATE SET resource = EXCLUDED.resource,
    fingerprint = EXCLUDED.fingerprint, create_time = EXCLUDED.create_time
WHERE l.create_time <= now() - make_interval(secs => :retention_s)""")

PRUNE = "DELETE FROM request_ledger WHERE create_time <= now() - make_interval(secs => $1)"


def prior_cte(name: str = "prior") -> str:
    """`<name> AS (…)`: the live record of this request id (no row: a first call)."""
    return f"""{name} AS (
    SELECT resource, fingerprint FROM request_ledger
    WHERE owner = :owner AND method = :ledger_method AND request_id = :request_id::uuid AND {_LIVE}
)"""


def record_cte(name: str, resource_sql: str, source: str) -> str:
    """`<name> AS (INSERT …)`: record the request id with `resource_sql` for each row of `source` (a
    CTE or `(SELECT 1) AS one`), when there is a request id; RETURNING 1 when it was claimed now.
    `ON CONFLICT DO NOTHING`: it takes no lock on an existing record (a `DO UPDATE` would, and
    concurrent puts then deadlock), so an expired record still in the table keeps its id claimed
    until the hourly prune removes it."""
    return f"""{name} AS (
    INSERT INTO request_ledger AS l (owner, method, request_id, resource, fingerprint, create_time)
    SELECT :owner, :ledger_method, :request_id::uuid, {resource_sql}, :fingerprint::bytea, now() FROM {source}
    WHERE :request_id::uuid IS NOT NULL
    ON CONFLICT (owner, method, request_id) DO NOTHING
    RETURNING 1
)"""


def claim_cte(name: str = "claim", prior: str = "prior") -> str:
    """`<name> AS (INSERT …)`: claim this request id BEFORE the write it guards (the write's CTE reads
    `EXISTS (SELECT 1 FROM <name>)`), so that of concurrent calls with one request id exactly one
    writes. RETURNING 1 when this call claimed it. No row: no request id; a live record seen by the
    statement (`prior`, a CTE of `prior_cte`); another call's record committed or in flight (the
    INSERT waits for that call's transaction, then finds its record). An expired record is taken
    over (the id is new again after RETENTION_S). A claimer locks the ledger row before the rows it
    writes, and every claimer does, so concurrent claimers cannot deadlock. The record's resource is
    '' (not known before the write). Why not `record_cte` after the write: each concurrent call then
    sees no record in its snapshot, waits for the other's row lock and applies its own write too."""
    return f"""{name} AS (
    INSERT INTO request_ledger AS l (owner, method, request_id, resource, fingerprint, create_time)
    SELECT :owner, :ledger_method, :request_id::uuid, '', :fingerprint::bytea, now()
    WHERE :request_id::uuid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {prior})
    ON CONFLICT (owner, method, request_id) DO UPDATE SET resource = EXCLUDED.resource,
        fingerprint = EXCLUDED.fingerprint, create_time = EXCLUDED.create_time
    WHERE l.create_time <= now() - make_interval(secs => :retention_s)
    RETURNING 1
)"""


@dataclass(frozen=True)
class Entry:
    """A live record: the resource the first call acted on, and its request fingerprint."""

    resource: str
    fingerprint: bytes | None


@dataclass(frozen=True)
class Ledger:
    """The records of one method (e.g. `UpdateFeedback`)."""

    method: str
    retention_s: float = RETENTION_S

    def params(self, owner: str, request_id: uuid.UUID | None, fingerprint: bytes | None = None) -> dict[str, Any]:
        """The NamedSQL values the fragments use."""
        return {"owner": owner, "ledger_method": self.method, "request_id": request_id, "fingerprint": fingerprint,
                "retention_s": self.retention_s}

    async def get(self, conn: asyncpg.Connection | asyncpg.Pool, owner: str, request_id: uuid.UUID) -> Entry | None:
        r = await conn.fetchrow(*GET_ENTRY.bind(self.params(owner, request_id)))
        return Entry(r["resource"], r["fingerprint"]) if r is not None else None

    async def record(self, conn: asyncpg.Connection | asyncpg.Pool, owner: str, request_id: uuid.UUID, resource: str,
                     fingerprint: bytes | None) -> None:
        await conn.execute(*RECORD_ENTRY.bind({**self.params(owner, request_id, fingerprint), "resource": resource}))


async def prune(conn: asyncpg.Connection | asyncpg.Pool, retention_s: float = RETENTION_S) -> int:
    """Delete every record older than `retention_s` (all methods); returns how many."""
    return int((await conn.execute(PRUNE, retention_s)).rsplit(" ", 1)[-1])
