"""Text searches that never scan and stay bounded (issue 17, "reads that stay flat").

A search (ListFeedback `text`, ListRecentFeedback `text`: case-insensitive substring, ILIKE) asked as
one query, newest first with LIMIT, is often planned as a walk of the time index testing every row
until the page is full: PostgreSQL guesses ≈ 3 % of rows match a substring, the bench's needle
matches 1 row in 200, so a heavy owner's search read ≈ 10,000 rows (156 ms at 1M reports, EXPLAIN
ANALYZE; the admin feed's rating half ≈ 100,000 ratings per page). Instead, in one snapshot:

1. the newest `2 × limit` rows that pass the other filters, tested for the text: a needle in most
   rows fills the page here (they are the newest matches, in order), for a bounded read;
2. else every match from the trigram index (migration 0009; MATERIALIZED, so no LIMIT turns it into
   a walk), only (ctid, time, id) of each kept, the page's rows read back by ctid: the work follows
   the number of matches (≈ 3 ms of index and ≈ 5 µs of heap recheck per match at 1M), small when
   the needle is rare — the case step 1 did not answer;
3. when step 2 meets more than `MATCH_CAP` matches (a needle in between: too common to list, too
   rare for step 1), the one query after all: at ≥ 1 match in MATCH_CAP / rows the walk is short.

Rows, order and keyset page tokens are those of the one query: every step carries the same filters,
keyset and (time, id) DESC order.
"""
from __future__ import annotations

from typing import Any

import asyncpg

from services.common.db import NamedSQL

# Step 1 tests the newest NEWEST_PAGES × limit rows (≈ 1–2 ms of ILIKE over realistic bodies for a
# page of 50); step 2 gives way to step 3 above MATCH_CAP matches.
NEWEST_PAGES = 2
MATCH_CAP = 10_000


def statements(columns: str, table: str, where: str, match: str, time: str) -> tuple[NamedSQL, NamedSQL, NamedSQL]:
    """(step 1, step 2, step 3) for `SELECT {columns} FROM {table} WHERE {where} AND {match}` ordered
    by ({time}, id) DESC; all take `:limit`, step 1 `:newest`, step 2 `:cap` too. Step 2 keeps only
    (ctid, time, id) of at most cap + 1 matches and reads the page's rows by ctid (one statement, one
    snapshot: copying thousands of whole rows — bodies, snapshots — into the CTE cost more than
    finding them); each row carries `matched`, how many it kept."""
    order = f"{time} DESC, id DESC"
    newest = NamedSQL(f"""SELECT * FROM (SELECT {columns} FROM {table} WHERE {where} ORDER BY {order} LIMIT :newest) AS n
WHERE {match} ORDER BY {order} LIMIT :limit""")
    every = NamedSQL(f"""WITH m AS MATERIALIZED (
    SELECT ctid AS tid, {time} AS t, id FROM {table} WHERE {where} AND {match} LIMIT :cap + 1)
SELECT {columns}, (SELECT count(*) FROM m) AS matched FROM {table}
WHERE ctid = ANY (ARRAY(SELECT tid FROM m ORDER BY t DESC, id DESC LIMIT :limit))
ORDER BY {order}""")
    walk = NamedSQL(f"SELECT {columns} FROM {table} WHERE {where} AND {match} ORDER BY {order} LIMIT :limit")
    return newest, every, walk


async def fetch_matches(pool: asyncpg.Pool, steps: tuple[NamedSQL, NamedSQL, NamedSQL], values: dict[str, Any]
                        ) -> list[asyncpg.Record]:
    """The first `values['limit']` matches, newest first: step 1, else 2, else 3 (module docstring).
    One read-only REPEATABLE READ transaction, each statement planned for its values (custom plan:
    `services.common.db.fetch_custom_plan` says why)."""
    newest, every, walk = steps
    limit = values["limit"]
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        got = await conn.fetch(*newest.bind({**values, "newest": NEWEST_PAGES * limit}))
        if len(got) >= limit:
            return got
        got = await conn.fetch(*every.bind({**values, "cap": MATCH_CAP}))
        if got and got[0]["matched"] > MATCH_CAP:
            return await conn.fetch(*walk.bind(values))
        return got
