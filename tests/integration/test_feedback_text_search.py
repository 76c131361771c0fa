"""Text searches run in two bounded steps (issue 17, repository/text_search.py: the newest rows, else every
match from the trigram index); the pages a user gets are those of one query over every match: the same
rows, the same (time, id) order, the same keyset pages, with ties on time across pages, future-stamped
rows, time ranges, and needles both common (step 1 answers) and rare (step 2 does)."""
from __future__ import annotations

import datetime as dt

import asyncpg

from services.common.db import migrate
from services.feedback.model.report import ReportFilter
from services.feedback.model.statistics import RecentFilter
from services.feedback.repository import create_pool
from services.feedback.repository.reports import ReportStore
from services.feedback.repository.statistics import StatisticsStore
from services.feedback.repository import text_search
from services.feedback.server import MIGRATIONS
from tests.helpers.report_search import LIST_TRUTH, NOW
from tests.helpers.report_search import chunks as _chunks
from tests.helpers.report_search import pages as _pages
from tests.helpers.report_search import seed_reports as _seed

RECENT_RATING_TRUTH = """SELECT id FROM feedback.ratings WHERE origin = 1 AND note ILIKE '%' || $1 || '%'
ORDER BY update_time DESC, id DESC"""
RECENT_REPORT_TRUTH = """SELECT id FROM feedback.feedback WHERE body ILIKE '%' || $1 || '%'
ORDER BY create_time DESC, id DESC"""


async def _seed_day_edges(url: str) -> None:
    """Rows on the UTC midnights of the last 40 days (exactly, and 1 µs either side; ties at midnight):
    where step 2's first day starts, whatever the hour the test runs."""
    midnight = dt.datetime.combine(NOW.astimezone(dt.UTC).date(), dt.time(), dt.UTC)
    conn = await asyncpg.connect(url)
    try:
        for d in range(40):
            for k, shift in enumerate((-1, 0, 0, 1)):
                t, i = midnight - dt.timedelta(days=d, microseconds=-shift), f"{d:02d}{k}"
                await conn.execute(
                    """INSERT INTO feedback.feedback (id, owner, request_id, target_kind, author, body, category,
                           snapshot, snapshot_source, create_time, update_time, instance)
                       VALUES ($1, 'o0', gen_random_uuid(), 'message', 1, $2, 0, '{}', 1, $3, $3, '')""",
                    f"e{i}", "edge needle" + (" gem" if k == 2 else ""), t)
                await conn.execute(
                    """INSERT INTO feedback.ratings (id, conversation, turn_index, owner, scope, aspect, sentiment,
                           origin, version, create_time, update_time, note)
                       VALUES ($1, 'instances/e', $2, 'o0', 1, 'tone', 1, 1, 1, $3, $3, $4)""",
                    f"q{i}", d * 4 + k, t, "a NEEDLE" + (" Gem" if k == 1 else ""))
    finally:
        await conn.close()






async def _assert_feed_pages(feed: StatisticsStore, word: str, size: int, want_ratings: list[str], want_reports: list[str],
                             label: tuple) -> None:
    """The admin feed's ratings and reports for `word`, paged by `size`, are `want_*` in that order."""
    async def ratings(after, n):
        got, _ = await feed.recent(RecentFilter(text=word), after, n, ratings=True, reports=False)
        return [(r.update_time, r.id) for r in got]

    async def reports(after, n):
        _, got = await feed.recent(RecentFilter(text=word), after, n, ratings=False, reports=True)
        return [(r.create_time, r.id) for r in got]
    assert await _pages(ratings, size) == _chunks(want_ratings, size), label
    assert await _pages(reports, size) == _chunks(want_reports, size), label

async def test_text_search_pages_equal_one_query_over_every_match(database_url, monkeypatch):
    monkeypatch.setattr(text_search, "MATCH_CAP", 30)  # 240 rows: every step answers some pages
    await migrate(database_url, "feedback", MIGRATIONS)
    await _seed(database_url)
    pool = await create_pool(database_url, 1, 2)
    try:
        reports, feed = ReportStore(pool), StatisticsStore(pool)
        truth = await asyncpg.connect(database_url)
        try:
            ranges = [(None, None), (NOW - dt.timedelta(days=20), None), (None, NOW - dt.timedelta(hours=3)),
                      (NOW - dt.timedelta(days=60), NOW - dt.timedelta(seconds=3600))]
            for word in ("needle", "gem"):
                for owner in ("o0", "o1"):
                    for start, end in ranges:
                        want = [r["id"] for r in await truth.fetch(LIST_TRUTH, owner, start, end, word)]
                        assert len(want) > (4 if word == "gem" or start else 10)
                        for size in (1, 7, 50):
                            async def fetch(after, n, owner=owner, start=start, end=end, word=word):
                                got = await reports.list_reports(owner, ReportFilter(text=word, start_time=start,
                                                                                  end_time=end), after, n)
                                return [(r.create_time, r.id) for r in got]
                            assert await _pages(fetch, size) == _chunks(want, size), (word, owner, start, end, size)
                want_ratings = [r["id"] for r in await truth.fetch(RECENT_RATING_TRUTH, word)]
                want_reports = [r["id"] for r in await truth.fetch(RECENT_REPORT_TRUTH, word)]
                for size in (1, 9, 50):
                    await _assert_feed_pages(feed, word, size, want_ratings, want_reports, (word, size))
        finally:
            await truth.close()
    finally:
        await pool.close()


async def test_day_windows_pages_equal_one_query_over_every_match(database_url, monkeypatch):
    """The admin feed's step 2 (the last days from migration 0017's day-keyed indexes): for windows of
    1 to ≈ 26 days (and none: past MAX_DAYS), full from the days alone or continued below their first
    day's start, with step 1 off so every page goes through it, the pages are those of one query."""
    monkeypatch.setattr(text_search, "MATCH_CAP", 30)
    monkeypatch.setattr(text_search, "NEWEST_PAGES", 0)
    heads: list[tuple[int, int]] = []
    recent_days = text_search._recent_days

    async def spy(conn, search, values):
        got, rest = await recent_days(conn, search, values)
        if rest is not values:
            heads.append((len(got), values["limit"]))
        return got, rest
    monkeypatch.setattr(text_search, "_recent_days", spy)
    await migrate(database_url, "feedback", MIGRATIONS)
    await _seed(database_url)
    await _seed_day_edges(database_url)
    truth = await asyncpg.connect(database_url)
    await truth.execute("ANALYZE feedback.feedback, feedback.ratings")  # step 2 sizes days from row counts
    pool = await create_pool(database_url, 1, 2)
    try:
        feed = StatisticsStore(pool)
        for window_rows in (0.001, 0.01, 0.05, 0.2, 5):
            monkeypatch.setattr(text_search, "WINDOW_ROWS", window_rows)
            for word in ("needle", "gem", "absent", "e"):
                want_ratings = [r["id"] for r in await truth.fetch(RECENT_RATING_TRUTH, word)]
                want_reports = [r["id"] for r in await truth.fetch(RECENT_REPORT_TRUTH, word)]
                assert word == "absent" or (want_ratings and want_reports)
                for size in (1, 7, 50) if word in ("gem", "absent") else (7, 50):
                    await _assert_feed_pages(feed, word, size, want_ratings, want_reports, (window_rows, word, size))
    finally:
        await truth.close()
        await pool.close()
    # The days answered whole pages and partial ones (then step 3 went on below them).
    assert any(n >= limit for n, limit in heads) and any(0 < n < limit for n, limit in heads)
