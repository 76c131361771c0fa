"""Text searches that never scan and stay bounded (issue 17, "reads that stay flat").

A search (ListFeedback `text`, ListRecentFeedback `text`: case-insensitive substring, ILIKE) asked as
one query, newest first with LIMIT, is often planned as a walk of the time index testing every row
until the page is full: PostgreSQL guesses ≈ 3 % of rows match a substring, the bench's needle
matches 1 row in 200, so a heavy owner's search read ≈ 10,000 rows (156 ms at 1M reports, EXPLAIN
ANALYZE; the admin feed's rating half ≈ 100,000 ratings per page). Instead, in one snapshot:

1. the newest `2 × limit` rows that pass the other filters, tested for the text: a needle in most
   rows fills the page here (they are the newest matches, in order), for a bounded read; when they
   hold at least a quarter page of matches, step 4 (a term in ≥ 1 row of 8: its walk is short);
2. (tables with a day-keyed trigram index, migration 0017: the admin feed) the matches of the last
   days, newest first: as many UTC days as hold about `WINDOW_ROWS × limit` rows (the table's row
   count over its time span, planner statistics), at most `MAX_DAYS`, ending at the day of the
   newest row that passes the filters; one index condition per day (`{day}:{trigram}` keys ⊇ the
   term's), so the index reads only those days' posting lists and the heap only their rows holding
   every trigram: the work follows the matches of a few days, not of all time (≈ 80 rows instead of
   ≈ 5,000 at 1M). A full page ends the search; fewer are all the matches since the first day's
   start, and step 3 continues below it (keyset `(day start, '')`). Skipped for a term without a
   whole trigram (fewer than 3 letters or digits in a row: the index cannot narrow it);
3. else every match from the trigram index (migration 0009; MATERIALIZED, so no LIMIT turns it into
   a walk), only (ctid, time, id) of each kept, the page's rows read back by ctid: the work follows
   the number of matches (≈ 3 ms of index and ≈ 5 µs of heap recheck per match at 1M), small when
   the needle is rare — the case steps 1 and 2 did not answer;
4. when step 3 meets more than `MATCH_CAP` matches (a needle in between: too common to list, too
   rare for step 1), the one query after all: at ≥ 1 match in MATCH_CAP / rows the walk is short.

Rows, order and keyset page tokens are those of the one query: every step carries the same filters,
keyset and (time, id) DESC order, and step 2's days are a prefix of that order.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from services.common.db import NamedSQL

# Step 1 tests the newest NEWEST_PAGES × limit rows (≈ 1–2 ms of ILIKE over realistic bodies for a
# page of 50); when they hold at least limit / COMMON matches, the term is common enough for step 4's
# walk to be short (step 2's days would hold thousands of matches, step 3 too many); step 2 reads the days holding ≈ WINDOW_ROWS × limit rows (a page of matches for a needle
# in ≥ 1 row of 300), and gives way to step 3 when that takes more than MAX_DAYS days (a thin table:
# every match is few); step 3 gives way to step 4 above MATCH_CAP matches.
NEWEST_PAGES = 2
COMMON = 4
WINDOW_ROWS = 300
MAX_DAYS = 31
MATCH_CAP = 10_000
EPOCH = dt.date(1970, 1, 1)  # day numbers of migration 0017's keys


@dataclass(frozen=True)
class Days:
    """A table's day-keyed trigram index (migration 0017): `keys`, its expression (`day_trigrams(time,
    text)`); `only`, the partial index's own condition ('' for none); `count`, the relation whose
    planner row count (`pg_class.reltuples`) counts the rows it holds; `oldest`, SQL of their oldest time."""
    keys: str
    only: str
    count: str
    oldest: str


@dataclass(frozen=True)
class Search:
    """The statements of one table's text search (`statements`); `window(n)`: step 2 over n days."""
    newest: NamedSQL
    every: NamedSQL
    walk: NamedSQL
    sizing: NamedSQL | None = None
    columns: str = ""
    table: str = ""
    where: str = ""
    match: str = ""
    order: str = ""
    days: Days | None = None
    _windows: dict[int, NamedSQL] = field(default_factory=dict, compare=False)

    def window(self, n: int) -> NamedSQL:
        """Step 2 over n days: parameters `:day0` … (text[]: one day's keys of the term's trigrams),
        `:limit`."""
        if n not in self._windows:
            assert self.days is not None
            only = f" AND {self.days.only}" if self.days.only else ""
            arms = " OR ".join(f"{self.days.keys} @> :day{i}::text[]" for i in range(n))
            # The term is tested on the rows the day keys found (OFFSET 0 keeps it out of the scan):
            # else the 0009 trigram index, whose match count PostgreSQL underestimates 50-fold, looks
            # cheaper, and the day keys are computed for each of its matches (≈ 500 ms at 100k).
            self._windows[n] = NamedSQL(f"""SELECT * FROM (
    SELECT {self.columns} FROM {self.table} WHERE {self.where}{only} AND ({arms}) OFFSET 0) AS d
WHERE {self.match} ORDER BY {self.order} LIMIT :limit""")
        return self._windows[n]


def statements(columns: str, table: str, where: str, match: str, time: str,
               days: Days | None = None, indexed: str | None = None) -> Search:
    """The steps for `SELECT {columns} FROM {table} WHERE {where} AND {match}` ordered by ({time}, id)
    DESC; all take `:limit`, step 1 `:newest`, step 3 `:cap`, step 2's sizing `:needle` (the raw term). Step 3
    keeps only (ctid, time, id) of at most cap + 1 matches and reads the page's rows by ctid (one
    statement, one snapshot: copying thousands of whole rows — bodies, snapshots — into the CTE cost
    more than finding them); each row carries `matched`, how many it kept. `indexed`: the same
    condition as `match` written so that step 3 finds its rows through indexes (default `match`)."""
    order = f"{time} DESC, id DESC"
    newest = NamedSQL(f"""SELECT * FROM (SELECT {columns} FROM {table} WHERE {where} ORDER BY {order} LIMIT :newest) AS n
WHERE {match} ORDER BY {order} LIMIT :limit""")
    every = NamedSQL(f"""WITH m AS MATERIALIZED (
    SELECT ctid AS tid, {time} AS t, id FROM {table} WHERE {where} AND {indexed or match} LIMIT :cap + 1)
SELECT {columns}, (SELECT count(*) FROM m) AS matched FROM {table}
WHERE ctid = ANY (ARRAY(SELECT tid FROM m ORDER BY t DESC, id DESC LIMIT :limit))
ORDER BY {order}""")
    walk = NamedSQL(f"SELECT {columns} FROM {table} WHERE {where} AND {match} ORDER BY {order} LIMIT :limit")
    if days is None:
        return Search(newest, every, walk)
    # The newest row the filters pass, the oldest the index holds, how many it holds, and the term's
    # whole trigrams (show_trgm's, without the word-edge ones that hold a space: a text containing
    # the term holds each of these; a multibyte trigram shown hashed is left out).
    sizing = NamedSQL(f"""SELECT
    (SELECT {time} FROM {table} WHERE {where} ORDER BY {order} LIMIT 1) AS newest,
    ({days.oldest}) AS oldest, (SELECT reltuples FROM pg_class WHERE oid = '{days.count}'::regclass) AS n,
    ARRAY(SELECT x FROM unnest(show_trgm(:needle)) AS x WHERE x ~ '^[^ ]{{3}}$') AS trigrams""")
    return Search(newest, every, walk, sizing, columns, table, where, match, order, days)


def first_day(newest: dt.datetime, oldest: dt.datetime, rows: float, limit: int) -> dt.date | None:
    """Step 2's first UTC day: the days before `newest`'s that hold ≈ WINDOW_ROWS × `limit` of `rows`
    rows spread over [oldest, newest]; None when that is more than MAX_DAYS days (or `rows` unknown)."""
    if rows <= 0:
        return None
    span_days = max(1.0, (newest - oldest).total_seconds() / 86400)
    days = max(1, math.ceil(WINDOW_ROWS * limit * span_days / rows))
    if days > MAX_DAYS:
        return None
    return newest.astimezone(dt.UTC).date() - dt.timedelta(days=days - 1)


async def _recent_days(conn: asyncpg.Connection, search: Search, values: dict[str, Any]
                       ) -> tuple[list[asyncpg.Record], dict[str, Any]]:
    """Step 2: (the matches since the first day, at most `limit`; the values step 3 continues with)."""
    if search.sizing is None:
        return [], values
    s = await conn.fetchrow(*search.sizing.bind(values))
    if s["newest"] is None or s["oldest"] is None or not s["trigrams"]:
        return [], values
    first = first_day(s["newest"], s["oldest"], float(s["n"] or 0), values["limit"])
    if first is None:
        return [], values
    n = (s["newest"].astimezone(dt.UTC).date() - first).days + 1
    keys = {f"day{i}": [f"{(first - EPOCH).days + i}:{t}" for t in s["trigrams"]] for i in range(n)}
    got = await conn.fetch(*search.window(n).bind({**values, **keys}))
    start = dt.datetime.combine(first, dt.time(), dt.UTC)
    # Every row the filters pass from `start` on is in `got`; below it, the keyset (time, id) < (start, '').
    return got, {**values, "after_time": start, "after_id": ""}


async def _every(conn: asyncpg.Connection, search: Search, values: dict[str, Any]) -> list[asyncpg.Record]:
    """Steps 3 and 4."""
    got = await conn.fetch(*search.every.bind({**values, "cap": MATCH_CAP}))
    if got and got[0]["matched"] > MATCH_CAP:
        return await conn.fetch(*search.walk.bind(values))
    return got


async def fetch_matches(pool: asyncpg.Pool, search: Search, values: dict[str, Any]) -> list[asyncpg.Record]:
    """The first `values['limit']` matches, newest first: step 1, else 2 (then 3 below its days), else
    3, else 4 (module docstring). One read-only REPEATABLE READ transaction, each statement planned
    for its values (custom plan: `services.common.db.fetch_custom_plan` says why)."""
    limit = values["limit"]
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        got = await conn.fetch(*search.newest.bind({**values, "newest": NEWEST_PAGES * limit}))
        if len(got) >= limit:
            return got
        if len(got) * COMMON >= limit:  # a term in ≥ 1 row of 2 × COMMON: a walk of ≈ 2 × COMMON × limit rows
            return await conn.fetch(*search.walk.bind(values))
        head, values = await _recent_days(conn, search, values)
        if len(head) >= limit:
            return head
        return head + await _every(conn, search, {**values, "limit": limit - len(head)})
