"""GetFeedbackStats reads hourly rollups kept by triggers (migrations 0010, 0012); whatever happens to the rows
(puts, re-dated updates, origin changes, deletes, from several sessions), the statistics equal a count of
the rows themselves, for windows that start mid-hour or on the hour."""
from __future__ import annotations

import asyncio
import datetime as dt
import random

import asyncpg

from services.common.db import create_pool, migrate
from services.feedback.repository.statistics import StatisticsStore
from services.feedback.server import MIGRATIONS

NOW = dt.datetime.now(dt.UTC)

RATING_TRUTH = """
SELECT scope, aspect, count(*) AS total, count(*) FILTER (WHERE sentiment = 1) AS positive,
       count(*) FILTER (WHERE sentiment = 2) AS neutral, count(*) FILTER (WHERE sentiment = 3) AS negative
FROM feedback.ratings WHERE origin = 1 AND update_time >= $1 GROUP BY 1, 2 ORDER BY 1, 2"""
REPORT_TRUTH = """SELECT category, count(*) FROM feedback.feedback WHERE create_time >= $1 GROUP BY 1 ORDER BY 1"""
TREND_TRUTH = """
SELECT (update_time AT TIME ZONE 'UTC')::date, count(*) FILTER (WHERE sentiment = 1),
       count(*) FILTER (WHERE sentiment = 2), count(*) FILTER (WHERE sentiment = 3)
FROM feedback.ratings WHERE origin = 1 AND update_time >= $1 GROUP BY 1"""
DIMENSION_TRUTH = """
SELECT scope, aspect, (update_time AT TIME ZONE 'UTC')::date, count(*) FILTER (WHERE sentiment = 1),
       count(*) FILTER (WHERE sentiment = 2), count(*) FILTER (WHERE sentiment = 3)
FROM feedback.ratings WHERE origin = 1 AND update_time >= $1 GROUP BY 1, 2, 3"""
ENGAGED_TRUTH = """
SELECT count(*) FROM (SELECT conversation, owner FROM feedback.ratings WHERE origin = 1 AND update_time >= $1
    UNION SELECT instance, owner FROM feedback.feedback WHERE create_time >= $1 AND instance <> '') AS e"""
STATES_TRUTH = """
SELECT choice, count(*) FROM (
    SELECT DISTINCT ON (conversation, owner) choice FROM feedback.ratings
    WHERE origin = 1 AND update_time >= $1 AND aspect = 'task_completion' AND choice <> ''
    ORDER BY conversation, owner, update_time DESC, turn_index DESC) AS l
GROUP BY choice ORDER BY count(*) DESC, choice"""
REPORT_TREND_TRUTH = """
SELECT (create_time AT TIME ZONE 'UTC')::date, count(*) FROM feedback.feedback WHERE create_time >= $1 GROUP BY 1"""


def _t(rnd: random.Random) -> dt.datetime:
    return NOW - dt.timedelta(seconds=rnd.randrange(0, 40 * 86400))


async def _write(url: str, seed: int) -> None:
    """One session's writes: inserts, updates (sentiment, time, origin), deletes."""
    rnd = random.Random(seed)
    conn = await asyncpg.connect(url)
    try:
        for i in range(150):
            t = _t(rnd)
            await conn.execute(
                """INSERT INTO feedback.ratings (id, conversation, turn_index, owner, scope, aspect, sentiment, origin,
                       version, create_time, update_time, choice) VALUES ($1, $8, $2, $9, $3, $4, $5, $6, 1, $7, $7, $10)
                   ON CONFLICT DO NOTHING""",
                f"r{seed}-{i}", i % 25, rnd.choice([1, 2]), rnd.choice(["reaction", "tone", "task_completion"]),
                rnd.choice([0, 1, 2, 3]), rnd.choice([1, 1, 1, 2]), t, f"instances/c{i % 9}", f"o{seed % 2}",
                rnd.choice(["", "complete", "partial"]))
            await conn.execute(
                """INSERT INTO feedback.feedback (id, owner, request_id, target_kind, author, body, category, snapshot,
                       snapshot_source, create_time, update_time, instance)
                   VALUES ($1, $4, gen_random_uuid(), 'message', 1, 'b', $2, '{}', 1, $3, $3, $5)""",
                f"f{seed}-{i}", rnd.choice([0, 1, 2]), t, f"o{seed % 2}", rnd.choice(["", f"instances/c{i % 11}"]))
        for i in range(0, 150, 3):
            await conn.execute("UPDATE feedback.ratings SET sentiment = $2, update_time = $3, choice = $4 WHERE id = $1",
                               f"r{seed}-{i}", rnd.choice([1, 3]), _t(rnd), rnd.choice(["", "complete"]))
        for i in range(1, 150, 7):
            await conn.execute("UPDATE feedback.ratings SET origin = 3 - origin WHERE id = $1", f"r{seed}-{i}")
            await conn.execute("UPDATE feedback.feedback SET category = 3 WHERE id = $1", f"f{seed}-{i}")
        for i in range(2, 150, 5):
            await conn.execute("DELETE FROM feedback.ratings WHERE id = $1", f"r{seed}-{i}")
            await conn.execute("DELETE FROM feedback.feedback WHERE id = $1", f"f{seed}-{i}")
        await conn.execute("UPDATE feedback.ratings SET note = 'x' WHERE id = $1", f"r{seed}-4")  # counted once
        # Conversations of one rating or report each: deleting it removes the conversation from the funnel.
        for i in range(12):
            t = _t(rnd)
            await conn.execute(
                """INSERT INTO feedback.ratings (id, conversation, turn_index, owner, scope, aspect, sentiment, origin,
                       version, create_time, update_time, choice) VALUES ($1, $2, 0, 'solo', 1, 'task_completion', 1,
                       1, 1, $3, $3, 'complete')""", f"s{seed}-{i}", f"instances/solo{seed}-{i}", t)
            await conn.execute(
                """INSERT INTO feedback.feedback (id, owner, request_id, target_kind, author, body, category, snapshot,
                       snapshot_source, create_time, update_time, instance)
                   VALUES ($1, 'solo', gen_random_uuid(), 'message', 1, 'b', 0, '{}', 1, $2, $2, $3)""",
                f"sf{seed}-{i}", t, f"instances/solof{seed}-{i}")
        for i in range(0, 12, 2):
            await conn.execute("DELETE FROM feedback.ratings WHERE id = $1", f"s{seed}-{i}")
            await conn.execute("DELETE FROM feedback.feedback WHERE id = $1", f"sf{seed}-{i}")
    finally:
        await conn.close()


async def test_stats_from_rollups_equal_a_count_of_the_rows(database_url):
    await migrate(database_url, "feedback", MIGRATIONS)
    await asyncio.gather(*(_write(database_url, s) for s in range(4)))
    pool = await create_pool(database_url, "feedback", 1, 2)
    try:
        repo = StatisticsStore(pool)
        conn = await asyncpg.connect(database_url)
        try:
            on_the_hour = NOW.replace(minute=0, second=0, microsecond=0)
            for days, minutes, start in ((30, 17, NOW), (7, 0, NOW), (1, 45, NOW), (60, 3, NOW), (30, 0, on_the_hour),
                                         (2, 0, on_the_hour)):
                since = start - dt.timedelta(days=days, minutes=minutes)
                aspects, categories, daily = await repo.stats(since)
                truth = [tuple(r) for r in await conn.fetch(RATING_TRUTH, since)]
                got = [(int(a.scope), a.aspect, a.total, a.positive, a.neutral, a.negative) for a in aspects]
                assert got == truth, days
                assert [(int(c), n) for c, n in categories] == [tuple(r) for r in await conn.fetch(REPORT_TRUTH, since)]
                got_days: dict[dt.date, tuple[int, int, int, int]] = {}
                for d in daily:
                    p, n, g, r = got_days.get(d.day, (0, 0, 0, 0))
                    got_days[d.day] = (p + d.positive, n + d.neutral, g + d.negative, r + d.reports)
                want: dict[dt.date, tuple[int, int, int, int]] = {}
                for r in await conn.fetch(TREND_TRUTH, since):
                    want[r[0]] = (r[1], r[2], r[3], 0)
                for r in await conn.fetch(REPORT_TREND_TRUTH, since):
                    p, n, g, _ = want.get(r[0], (0, 0, 0, 0))
                    want[r[0]] = (p, n, g, r[1])
                assert got_days == want, days
                dims = sorted((int(a.scope), a.aspect, d.day, d.positive, d.neutral, d.negative)
                              for a, d in await repo.dimension_days(since))
                assert dims == sorted(tuple(r) for r in await conn.fetch(DIMENSION_TRUTH, since)), days
                engaged, states = await repo.funnel(since, "task_completion")
                assert engaged == await conn.fetchval(ENGAGED_TRUTH, since), days
                assert states == [tuple(r) for r in await conn.fetch(STATES_TRUTH, since)], days
        finally:
            await conn.close()
    finally:
        await pool.close()
