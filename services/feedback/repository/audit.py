"""The audit trail (table `audit_records`): SQL and the store that runs it.

A mutation's record is written by `insert_audit(conn, …)` on the mutation's own connection, inside its
transaction (a change cannot commit without its record); reads of other owners' bodies are recorded
in one statement per read. Records are never pruned.
"""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from services.common.db import NamedSQL
from services.common.ids import new_id
from services.feedback.model.audit import AuditEntry, AuditRecord
from services.feedback.model.enums import AuditAction

INSERT_AUDIT = """
INSERT INTO audit_records (id, actor, time, action, feedback_id, owner, changes, method)
SELECT id, actor, time, action, feedback_id, owner, changes::jsonb, method
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::smallint[], $5::text[], $6::text[], $7::text[],
            $8::text[]) AS u (id, actor, time, action, feedback_id, owner, changes, method)"""

# Newest first; `:owner` NULL = every owner's records (admin), `:feedback` '' = every report.
LIST_AUDIT = NamedSQL("""
SELECT id, actor, time, action, feedback_id, owner, changes, method FROM audit_records
WHERE (:owner::text IS NULL OR owner = :owner) AND (:feedback = '' OR feedback_id = :feedback)
  AND (:after_time::timestamptz IS NULL OR (time, id) < (:after_time, :after_id))
ORDER BY time DESC, id DESC LIMIT :limit""")

async def insert_audit(conn: asyncpg.Connection | asyncpg.Pool, entries: Sequence[AuditEntry]) -> None:
    """Write `entries` (one statement), stamped now."""
    if not entries:
        return
    now = dt.datetime.now(dt.UTC)
    await conn.execute(
        INSERT_AUDIT, [new_id() for _ in entries], [e.actor for e in entries], [now] * len(entries),
        [int(e.action) for e in entries], [e.feedback_id for e in entries], [e.owner for e in entries],
        [json.dumps([{"field": f, "old_value": o, "new_value": n} for f, o, n in e.changes]) for e in entries],
        [e.method for e in entries],
    )


def _record(r: asyncpg.Record) -> AuditRecord:
    changes = tuple((c["field"], c["old_value"], c["new_value"]) for c in r["changes"])
    return AuditRecord(r["id"], r["time"], AuditEntry(r["actor"], AuditAction(r["action"]), r["feedback_id"],
                                                      r["owner"], changes, r["method"]))


@dataclass
class AuditStore:
    """The audit trail over `pool` (the Audit use case's store)."""

    pool: asyncpg.Pool

    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        await insert_audit(self.pool, entries)

    async def list_audit(self, owner: str | None, feedback_id: str, after: tuple[dt.datetime, str] | None,
                         limit: int) -> list[AuditRecord]:
        values = {"owner": owner, "feedback": feedback_id, "after_time": after[0] if after else None,
                  "after_id": after[1] if after else "", "limit": limit}
        return [_record(r) for r in await self.pool.fetch(*LIST_AUDIT.bind(values))]
