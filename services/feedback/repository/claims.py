"""Review claims (table `feedback_claims`, migration 0050): SQL and the store that runs it.

A claim or release runs in one transaction that first locks the report's row (`FOR UPDATE`, owner-scoped),
so concurrent claims of one report are decided one after the other, and writes its audit record in the
same transaction. Times come from PostgreSQL's clock (`now()`), the one clock every replica shares.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from services.feedback.model.audit import AuditEntry
from services.feedback.model.report import Claim
from services.feedback.repository.audit import insert_audit

LOCK_REPORT = "SELECT id FROM feedback WHERE id = $1 AND owner = $2 FOR UPDATE"
CURRENT = "SELECT claimant, session, expire_time, now() AS now FROM feedback_claims WHERE feedback_id = $1"
UPSERT = """
INSERT INTO feedback_claims (feedback_id, owner, claimant, session, expire_time)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
ON CONFLICT (feedback_id) DO UPDATE SET claimant = EXCLUDED.claimant, session = EXCLUDED.session,
    expire_time = EXCLUDED.expire_time
RETURNING claimant, session, expire_time"""
END = "DELETE FROM feedback_claims WHERE feedback_id = $1"
LIVE = """SELECT feedback_id, claimant, session, expire_time FROM feedback_claims
WHERE feedback_id = ANY($1::text[]) AND expire_time > now()"""
LIVE_ONE = "SELECT claimant, session, expire_time FROM feedback_claims WHERE feedback_id = $1 AND expire_time > now()"
# A guard for a triage statement on `feedback` (UpdateFeedback, FileFeedback's filing claim): no live claim
# of another claimant than ($claimant, $session), the two parameters numbered by the caller.
NOT_CLAIMED_BY_OTHERS = """NOT EXISTS (SELECT 1 FROM feedback_claims c WHERE c.feedback_id = feedback.id
    AND c.expire_time > now() AND (c.claimant, c.session) IS DISTINCT FROM (${claimant}::text, ${session}::text))"""


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """`found`: the report is the owner's; `held`: another session's live claim (nothing written);
    `claim`: the claim after the call (None when released or free)."""

    found: bool
    held: Claim | None = None
    claim: Claim | None = None


def _claim(r: asyncpg.Record | None) -> Claim | None:
    return Claim(r["claimant"], r["session"], r["expire_time"]) if r is not None else None


async def live_claim(db: asyncpg.Connection | asyncpg.Pool, feedback_id: str) -> Claim | None:
    """The report's live claim, read by a new statement (after a row lock it sees every committed claim)."""
    return _claim(await db.fetchrow(LIVE_ONE, feedback_id))


@dataclass
class ClaimStore:
    pool: asyncpg.Pool

    async def claim(self, owner: str, feedback_id: str, claimant: str, session: str, ttl_s: float,
                    audit: AuditEntry) -> ClaimOutcome:
        """Take or renew the claim unless another session holds a live one; `audit` is written when the
        claimant changes (not on a renewal)."""
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(LOCK_REPORT, feedback_id, owner) is None:
                return ClaimOutcome(found=False)
            cur = await conn.fetchrow(CURRENT, feedback_id)
            live = cur is not None and cur["expire_time"] > cur["now"]
            mine = cur is not None and (cur["claimant"], cur["session"]) == (claimant, session)
            if live and not mine:
                return ClaimOutcome(found=True, held=_claim(cur))
            got = _claim(await conn.fetchrow(UPSERT, feedback_id, owner, claimant, session, ttl_s))
            if not (live and mine):
                await insert_audit(conn, [audit])
            return ClaimOutcome(found=True, claim=got)

    async def release(self, owner: str, feedback_id: str, claimant: str, session: str,
                      audit: AuditEntry) -> ClaimOutcome:
        """End the caller's live claim (audited); nothing to end is not an error; another session's live
        claim is returned as `held`, nothing written."""
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(LOCK_REPORT, feedback_id, owner) is None:
                return ClaimOutcome(found=False)
            cur = await conn.fetchrow(CURRENT, feedback_id)
            if cur is None or cur["expire_time"] <= cur["now"]:
                return ClaimOutcome(found=True)
            if (cur["claimant"], cur["session"]) != (claimant, session):
                return ClaimOutcome(found=True, held=_claim(cur))
            await conn.execute(END, feedback_id)
            await insert_audit(conn, [audit])
            return ClaimOutcome(found=True)

    async def live(self, feedback_ids: Sequence[str]) -> dict[str, Claim]:
        """The live claims of these reports (one statement)."""
        if not feedback_ids:
            return {}
        rows = await self.pool.fetch(LIVE, list(feedback_ids))
        return {r["feedback_id"]: Claim(r["claimant"], r["session"], r["expire_time"]) for r in rows}

