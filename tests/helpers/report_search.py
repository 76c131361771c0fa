"""Reports and ratings to search, and pages to compare: shared by the text-search tests
(tests/integration/test_feedback_text_search.py, test_feedback_quote_index.py)."""
from __future__ import annotations

import datetime as dt
import json
import random

import asyncpg

NOW = dt.datetime.now(dt.UTC)
# Seconds back from now: a few minutes to 300 days (every window of WINDOWS_S and past the last),
# with repeated times (ties) and rows stamped after now.
OFFSETS = [-120, 0, 0, 30, 3599, 3600, 3600, 3601, 7200, 5 * 3600, 20 * 3600, 86400, 86400, 3 * 86400,
           10 * 86400, 40 * 86400, 57 * 86400, 58 * 86400, 100 * 86400, 300 * 86400]

# One owner's reports whose body or quoted text holds $4 (ILIKE), within [$2, $3): the one query a
# search's pages must equal.
LIST_TRUTH = """
SELECT id FROM feedback.feedback WHERE owner = $1
  AND (body ILIKE '%' || $4 || '%' OR snapshot->>'target_text' ILIKE '%' || $4 || '%')
  AND ($2::timestamptz IS NULL OR create_time >= $2) AND ($3::timestamptz IS NULL OR create_time < $3)
ORDER BY create_time DESC, id DESC"""


async def seed_reports(url: str) -> None:
    """240 reports of owners o0 and o1 (bodies and quoted texts with "needle" and "gem" at times from OFFSETS)
    and 240 ratings of o0, by plain INSERTs."""
    rnd = random.Random(17)
    conn = await asyncpg.connect(url)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    try:
        for i in range(240):
            t = NOW - dt.timedelta(seconds=rnd.choice(OFFSETS))
            body = rnd.choice(["a NEEDLE here", "needle", "nothing", "hay"]) + (" a rare Gem" if i % 9 == 0 else "")
            target = rnd.choice(["", "the needle in the reply", "plain"])
            await conn.execute(
                """INSERT INTO feedback.feedback (id, owner, request_id, target_kind, author, body, category, snapshot,
                       snapshot_source, create_time, update_time, instance)
                   VALUES ($1, $2, gen_random_uuid(), 'message', 1, $3, 0, $4, 1, $5, $5, '')""",
                f"f{i:03d}", f"o{i % 2}", body, {"target_text": target}, t)
            await conn.execute(
                """INSERT INTO feedback.ratings (id, conversation, turn_index, owner, scope, aspect, sentiment, origin,
                       version, create_time, update_time, note) VALUES ($1, 'instances/c', $2, 'o0', 1, 'tone', 1, $3,
                       1, $4, $4, $5)""",
                f"r{i:03d}", i, rnd.choice([1, 1, 2]), t, rnd.choice(["needle!", "Needle", "no", ""]) + (" gem" if i % 11 == 0 else ""))
    finally:
        await conn.close()


async def pages(fetch, size: int) -> list[list[str]]:
    """Every page of `size` (keyset on (time, id) of a page's last row), as lists of ids."""
    pages, after = [], None
    while True:
        got = await fetch(after, size + 1)
        pages.append([x[1] for x in got[:size]])
        if len(got) <= size:
            return pages
        after = got[size - 1][0], got[size - 1][1]


def chunks(ids: list[str], size: int) -> list[list[str]]:
    return [ids[i:i + size] for i in range(0, len(ids), size)] if ids else [[]]
