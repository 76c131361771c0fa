"""The quoted replies' side index (migration 0095): the quote indexer's statements.

A report's quote reaches `feedback_quotes` behind its create: the create's transaction leaves a
`feedback_quotes_pending` row (trigger), `index_pending` moves such rows into the side table. After a
crash (the unlogged side table and its marker emptied) `rebuild_step` refills it in id order and
`mark_built` sets the marker once every report has been through it. ListFeedback's text search reads
the same tables (reports.QUOTE_CANDIDATES)."""
from __future__ import annotations

from dataclasses import dataclass

import asyncpg

# One pass: up to $1 pending reports (rows another replica's pass holds are skipped) moved into the side
# table with the text each report holds now; a deleted report's pending row is just dropped. Commits
# asynchronously (set_config(..., true) holds to this statement's transaction end): a pass lost in a crash
# is only done again (its pending rows come back), so it need not wait for a WAL flush of its own.
# Answers how many pending rows it took and whether the side table is built.
INDEX_PENDING = """
WITH taken AS (
    SELECT owner, id FROM feedback_quotes_pending ORDER BY owner, id LIMIT $1 FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM feedback_quotes_pending p USING taken t WHERE p.owner = t.owner AND p.id = t.id RETURNING p.id
), indexed AS (
    INSERT INTO feedback_quotes (id, owner, quote)
    SELECT f.id, f.owner, f.snapshot ->> 'target_text' FROM feedback f JOIN moved m ON m.id = f.id
    WHERE coalesce(f.snapshot ->> 'target_text', '') <> ''
    ON CONFLICT (id) DO UPDATE SET quote = EXCLUDED.quote
)
SELECT (SELECT count(*) FROM moved) AS moved, EXISTS (SELECT FROM feedback_quotes_built) AS built,
       set_config('synchronous_commit', 'off', true) IS NOT NULL AS async_commit"""

# Rebuild: the next $2 reports after id $1 (id order) written into the side table; answers the last id
# and how many reports it read (fewer than $2: the end).
REBUILD_STEP = """
WITH batch AS (
    SELECT id, owner, snapshot ->> 'target_text' AS quote FROM feedback WHERE id > $1 ORDER BY id LIMIT $2
), indexed AS (
    INSERT INTO feedback_quotes (id, owner, quote) SELECT id, owner, quote FROM batch WHERE coalesce(quote, '') <> ''
    ON CONFLICT (id) DO UPDATE SET quote = EXCLUDED.quote
)
SELECT max(id) AS last, count(*) AS n FROM batch"""

MARK_BUILT = "INSERT INTO feedback_quotes_built VALUES (true) ON CONFLICT DO NOTHING"


@dataclass(frozen=True)
class Pass:
    """What one `index_pending` did: pending reports taken, and whether the side table is built."""
    moved: int
    built: bool


@dataclass
class QuoteStore:
    """The quote indexer's statements over `pool`."""

    pool: asyncpg.Pool

    async def index_pending(self, limit: int) -> Pass:
        """Move up to `limit` pending reports' quotes into the side table (one statement). A report
        deleted while the pass ran fails the side row's foreign key check, which rolls the pass back:
        it is run again (the report is gone then, and its pending row is dropped), up to 3 times."""
        attempts = 3
        while True:
            try:
                r = await self.pool.fetchrow(INDEX_PENDING, limit)
                return Pass(r["moved"], r["built"])
            except asyncpg.ForeignKeyViolationError:
                attempts -= 1
                if attempts == 0:
                    raise

    async def rebuild_step(self, after: str, limit: int) -> tuple[str, int]:
        """Write the quotes of the next `limit` reports with an id above `after`: (the last id read, how
        many reports were read; fewer than `limit` means the end)."""
        r = await self.pool.fetchrow(REBUILD_STEP, after, limit)
        return r["last"] or after, r["n"]

    async def mark_built(self) -> None:
        """The side table holds every report that is not pending (the rebuild has read them all)."""
        await self.pool.execute(MARK_BUILT)
