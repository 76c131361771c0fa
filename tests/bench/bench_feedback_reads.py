"""Feedback reads as the data grows (issue 17): `make bench` seeds 10k, 100k and 1M reports and 10x as
many ratings (BENCH_FEEDBACK_READ_SIZES, comma-separated report counts, default 10000,100000,1000000)
into the real schema, and times the real feedback service (its own process, gRPC on loopback, one
client) at each size.

Data (SQL `generate_series`, so 1M reports + 10M ratings load in minutes, not hours): 5,000 owners, three
heavy ones holding 5 % of the reports each; reports spread uniformly over the last 180 days (more rows
= a denser history), bodies and target texts of 2 to 8 sentences drawn from a 400-sentence English
pool (≈ 150–900 characters), one report in 200 containing the word "checksum"; ratings 40 per
conversation (10 turns × 4 aspects), one in ten with a note (the same needle rate in notes).
Measured (each REPS calls after WARMUP, p50 and p99, ms):
- `fbread_list_{n}`: a heavy owner's ListFeedback, no filter (first page of 50);
- `fbread_list_status_instance_{n}`: the same owner, status OPEN + one of their instances;
- `fbread_list_text_{n}`: the same owner, text "checksum";
- `fbread_recent_text_{n}`: admin ListRecentFeedback, text "checksum";
- `fbread_stats_{n}`: admin GetFeedbackStats over 30 days;
- `fbread_ratings_{n}`: ListRatings of one conversation of that owner.
`fbread_*_vs_{smallest}` = p50 at the largest size / p50 at the smallest (target ≤ 2; p50 ≤ 20 ms,
stats ≤ 100 ms). The floor of a read is the smallest size's figure: the same RPC, the same code, on a
small table.
"""
from __future__ import annotations

import os
import statistics
import time

import asyncpg
import grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc

from services.common.auth import SCOPE_FEEDBACK_ADMIN, mint_token
from tests.bench.stats import tail
from tests.bench.bench_chat import SECRET, service_env, start_services, stop_services

SIZES = [int(x) for x in os.environ.get("BENCH_FEEDBACK_READ_SIZES", "10000,100000,1000000").split(",")]
REPS = int(os.environ.get("BENCH_FEEDBACK_READ_REPS", "60"))
WARMUP = 10
SMOKE = {"SIZES": [10_000], "REPS": 3, "WARMUP": 1}  # the heavy owner has text and filter matches; one size: its `_vs_` are 1
HEAVY_OWNER = "user-0"
NEEDLE = "checksum"

_WORDS = ("the agent answered with a wrong number of users again and ignored my question about billing "
          "invoice export report dashboard latency timeout error retry login password reset token account "
          "settings profile upload file image document summary translation english french german table "
          "chart query database migration deploy release version update install package library python "
          "javascript function class method variable loop test case build pipeline server client request "
          "response status code page link button form field value date time zone calendar meeting email "
          "message notification alert warning failure success slow fast missing duplicate broken unclear "
          "helpful polite rude long short detailed vague accurate outdated invented hallucinated citation "
          "source reference tool call search result context memory conversation earlier later today").split()

SEED_SENTENCES = f"""
CREATE TABLE IF NOT EXISTS public.bench_sentences AS
SELECT k, initcap(string_agg((ARRAY[{",".join(f"'{w}'" for w in _WORDS)}])[1 + ((hashint4(k * 97 + j)::bigint & 2147483647) % {len(_WORDS)})],
                     ' ' ORDER BY j)) || '.' AS s
FROM generate_series(0, 399) k, generate_series(1, 8 + k % 12) j GROUP BY k
"""
# Reports [$1, $2): owner heavy (user-0/1/2, 5 % each) or one of 5,000; time uniform over 180 days.
SEED_FEEDBACK = f"""
WITH s AS (SELECT array_agg(s ORDER BY k) AS a FROM public.bench_sentences),
g AS (SELECT i, (hashint4(i)::bigint & 2147483647) AS h, (hashint4(i + 1000000007)::bigint & 2147483647) AS h2 FROM generate_series($1::int, $2::int - 1) i)
INSERT INTO feedback (id, owner, request_id, target_kind, message, instance, trace_id, surface, author, body,
    sentiment, category, snapshot, snapshot_source, turn_time, trace_state, status, version, create_time, update_time)
SELECT 'bf' || g.i, o.owner, md5('r' || g.i)::uuid, 'message',
    'instances/' || o.owner || '-' || ((g.h2 / 7) % 20) || '/messages/m' || g.i,
    'instances/' || o.owner || '-' || ((g.h2 / 7) % 20), md5('t' || g.i), 1, 1 + (g.h % 10 = 0)::int,
    s.a[1 + g.h % 400] || ' ' || s.a[1 + g.h2 % 400]
        || CASE WHEN (g.h2 / 3) % 200 = 7 THEN ' The {NEEDLE} it printed was wrong.' ELSE '' END,
    1 + g.h2 % 2, g.h2 % 6,
    jsonb_build_object('target_text', s.a[1 + g.h2 % 397] || ' ' || s.a[1 + (g.h2 / 400) % 400] || ' '
                           || s.a[1 + (g.h2 / 7) % 400] || ' ' || s.a[1 + (g.h2 / 13) % 400],
                       'turn_index', g.h % 30),
    1, t.t, 2, 1 + (g.h / 3) % 4, 1, t.t, t.t
FROM g, s,
LATERAL (SELECT CASE WHEN g.h % 20 < 3 THEN 'user-' || (g.h % 20) ELSE 'user-' || (3 + g.h2 % 5000) END AS owner) o,
LATERAL (SELECT now() - make_interval(secs => (g.h2 % (180 * 86400))::float8) AS t) t
"""
# Ratings [$1, $2): 40 per conversation (turn 0..9 × 4 aspects), owners as above (per conversation).
SEED_RATINGS = f"""
WITH s AS (SELECT array_agg(s ORDER BY k) AS a FROM public.bench_sentences),
g AS (SELECT j, j / 40 AS c, (hashint4(j / 40)::bigint & 2147483647) AS hc, (hashint4(j + 77)::bigint & 2147483647) AS h FROM generate_series($1::int, $2::int - 1) j)
INSERT INTO ratings (id, conversation, turn_index, owner, scope, aspect, sentiment, note, origin, message,
    version, create_time, update_time, choice)
SELECT 'br' || g.j, 'instances/' || o.owner || '-c' || g.c, (g.j % 40) / 4, o.owner, 1,
    (ARRAY['reaction', 'accuracy', 'tone', 'task_completion'])[1 + g.j % 4], 1 + g.h % 3,
    CASE WHEN g.h % 10 = 0 THEN s.a[1 + (g.h / 10) % 400]
        || CASE WHEN (g.h / 10) % 200 = 7 THEN ' Wrong {NEEDLE}.' ELSE '' END ELSE '' END,
    1, 'instances/' || o.owner || '-c' || g.c || '/messages/m' || g.j, 1, t.t, t.t,
    CASE WHEN g.j % 4 = 3 THEN (ARRAY['complete', 'partial', 'not_complete'])[1 + g.h % 3] ELSE '' END
FROM g, s,
LATERAL (SELECT CASE WHEN g.hc % 20 < 3 THEN 'user-' || (g.hc % 20) ELSE 'user-' || (3 + g.hc % 5000) END AS owner) o,
LATERAL (SELECT now() - make_interval(secs => (g.h % (180 * 86400))::float8) AS t) t
"""
CHUNK = 250_000
RATING_CONSTRAINTS = """
SELECT conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint
WHERE conrelid = 'feedback.ratings'::regclass AND contype IN ('p', 'u')"""
RATING_INDEXES = """
SELECT c.relname AS name, pg_get_indexdef(c.oid) AS def FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE i.indrelid = 'feedback.ratings'::regclass AND a.amname <> 'gin'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)"""
REBUILD_ROLLUPS = """
TRUNCATE feedback.rating_hour_counts, feedback.report_hour_counts;
INSERT INTO feedback.rating_hour_counts
SELECT date_trunc('hour', update_time, 'UTC'), scope, aspect, sentiment, 0, count(*)
FROM feedback.ratings WHERE origin = 1 GROUP BY 1, 2, 3, 4;
INSERT INTO feedback.report_hour_counts
SELECT date_trunc('hour', create_time, 'UTC'), category, 0, count(*) FROM feedback.feedback GROUP BY 1, 2;
TRUNCATE feedback.conversation_activity, feedback.latest_choices, feedback.activity_hour_counts,
    feedback.latest_choice_hour_counts;
ALTER TABLE feedback.conversation_activity DISABLE TRIGGER USER;
ALTER TABLE feedback.latest_choices DISABLE TRIGGER USER;
INSERT INTO feedback.conversation_activity
SELECT conversation, owner, date_trunc('hour', max(t), 'UTC') FROM (
    SELECT conversation, owner, update_time AS t FROM feedback.ratings WHERE origin = 1
    UNION ALL
    SELECT instance, owner, create_time FROM feedback.feedback WHERE instance <> '') AS a
GROUP BY conversation, owner;
INSERT INTO feedback.latest_choices
SELECT DISTINCT ON (conversation, owner, aspect) conversation, owner, aspect, choice, update_time, turn_index
FROM feedback.ratings WHERE origin = 1 AND choice <> ''
ORDER BY conversation, owner, aspect, update_time DESC, turn_index DESC;
ALTER TABLE feedback.conversation_activity ENABLE TRIGGER USER;
ALTER TABLE feedback.latest_choices ENABLE TRIGGER USER;
INSERT INTO feedback.activity_hour_counts SELECT last_hour, 0, count(*) FROM feedback.conversation_activity GROUP BY 1;
INSERT INTO feedback.latest_choice_hour_counts
SELECT aspect, date_trunc('hour', update_time, 'UTC'), choice, 0, count(*) FROM feedback.latest_choices GROUP BY 1, 2, 3;
"""
GIN_INDEXES = """
SELECT c.relname AS name, pg_get_indexdef(c.oid) AS def FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE i.indrelid IN ('feedback.feedback'::regclass, 'feedback.ratings'::regclass, 'feedback.feedback_quotes'::regclass)
  AND a.amname = 'gin'"""
# The quotes' side index (migration 0095) as the quote indexer leaves it: every report's quote indexed,
# none pending (the seed's inserts run with the tables' user triggers off, so they leave no pending row).
REBUILD_QUOTES = """
TRUNCATE feedback.feedback_quotes, feedback.feedback_quotes_pending;
INSERT INTO feedback.feedback_quotes (id, owner, quote)
SELECT id, owner, snapshot ->> 'target_text' FROM feedback.feedback WHERE coalesce(snapshot ->> 'target_text', '') <> '';
INSERT INTO feedback.feedback_quotes_built VALUES (true) ON CONFLICT DO NOTHING;
"""


async def _seed(url: str, have: int, want: int) -> float:
    """Grow the seeded data from `have` to `want` reports (and 10x ratings); seconds taken."""
    t0 = time.perf_counter()
    conn = await asyncpg.connect(url, server_settings={"search_path": "feedback", "maintenance_work_mem": "256MB"})
    try:
        await conn.execute(SEED_SENTENCES)
        # Indexes are rebuilt after the load (a bulk build is several times faster than row-by-row
        # inserts): the GIN ones of both tables and of the quotes' side table (migration 0095), every
        # one of `ratings` (10 rows per report). The other indexes of `feedback` are maintained as rows
        # go in. Same indexes when measuring.
        gin = await conn.fetch(GIN_INDEXES)
        for g in gin:
            await conn.execute(f"DROP INDEX feedback.{g['name']}")
        constraints = await conn.fetch(RATING_CONSTRAINTS)
        for c in constraints:
            await conn.execute(f"ALTER TABLE feedback.ratings DROP CONSTRAINT {c['name']}")
        plain = await conn.fetch(RATING_INDEXES)
        for g in plain:
            await conn.execute(f"DROP INDEX feedback.{g['name']}")
        # The statistics rollups' row triggers (migrations 0010, 0012, 0016) are rebuilt in bulk after the load: the
        # same counts the triggers would have left, without a trigger call per seeded row.
        for t in ("feedback", "ratings"):
            await conn.execute(f"ALTER TABLE feedback.{t} DISABLE TRIGGER USER")
        for lo in range(have, want, CHUNK):
            await conn.execute(SEED_FEEDBACK, lo, min(want, lo + CHUNK))
        for lo in range(have * 10, want * 10, CHUNK * 4):
            await conn.execute(SEED_RATINGS, lo, min(want * 10, lo + CHUNK * 4))
        await conn.execute(REBUILD_QUOTES)
        for c in constraints:
            await conn.execute(f"ALTER TABLE feedback.ratings ADD CONSTRAINT {c['name']} {c['def']}")
        for g in [*plain, *gin]:
            await conn.execute(g["def"])
        for t in ("feedback", "ratings"):
            await conn.execute(f"ALTER TABLE feedback.{t} ENABLE TRIGGER USER")
        await conn.execute(REBUILD_ROLLUPS)
        await conn.execute("VACUUM ANALYZE feedback.feedback")
        await conn.execute("VACUUM ANALYZE feedback.ratings")
        await conn.execute("VACUUM ANALYZE feedback.feedback_quotes")
        # The rollups were truncated and bulk-filled: their planner statistics too (autovacuum gets there
        # later; before this, GetFeedbackStats at 10k measured 35 ms in one run against 15 ms at 1M).
        await conn.execute("ANALYZE feedback.rating_hour_counts, feedback.report_hour_counts, "
                           "feedback.conversation_activity, feedback.latest_choices, feedback.activity_hour_counts, "
                           "feedback.latest_choice_hour_counts")
        conv = await conn.fetchval(
            "SELECT conversation FROM feedback.ratings WHERE owner = $1 ORDER BY id LIMIT 1", HEAVY_OWNER)
    finally:
        await conn.close()
    _seed.conversation = conv  # type: ignore[attr-defined]
    return time.perf_counter() - t0


async def _time(call, reps: int) -> list[float]:
    """`reps` latencies (ms) of `call` after WARMUP calls."""
    for _ in range(WARMUP):
        await call()
    lat = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await call()
        lat.append((time.perf_counter() - t0) * 1000)
    return lat


async def run(ctx) -> dict[str, float]:
    url = await ctx.new_database()
    env, ports = service_env(ctx, url)
    procs = await start_services(env, ports, ["collector", "agent", "chat", "feedback"])
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{ports['feedback']}")
    out: dict[str, float] = {}
    try:
        fb = feedback_pb2_grpc.FeedbackServiceStub(ch)
        owner_md = (("authorization", f"Bearer {mint_token(SECRET, HEAVY_OWNER)}"),)
        admin_md = (("authorization", f"Bearer {mint_token(SECRET, 'ops', (SCOPE_FEEDBACK_ADMIN,))}"),)
        instance = f"instances/{HEAVY_OWNER}-7"
        have = 0
        for n in SIZES:
            out[f"fbread_seed_s_{n}"] = await _seed(url, have, n)
            have = n
            conv = _seed.conversation  # type: ignore[attr-defined]
            calls = {
                "list": lambda: fb.ListFeedback(pb.ListFeedbackRequest(page_size=50), metadata=owner_md),
                "list_status_instance": lambda: fb.ListFeedback(pb.ListFeedbackRequest(
                    page_size=50, status=pb.STATUS_OPEN, instance=instance), metadata=owner_md),
                "list_text": lambda: fb.ListFeedback(pb.ListFeedbackRequest(page_size=50, text=NEEDLE),
                                                     metadata=owner_md),
                "recent_text": lambda: fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(
                    page_size=50, text=NEEDLE), metadata=admin_md),
                "stats": lambda: fb.GetFeedbackStats(pb.GetFeedbackStatsRequest(window_days=30), metadata=admin_md),
                "ratings": lambda conv=conv: fb.ListRatings(pb.ListRatingsRequest(conversation=conv, page_size=50),
                                                            metadata=owner_md),
            }
            for name, call in calls.items():
                resp = await call()
                if name != "stats" and not (getattr(resp, "feedback", None) or getattr(resp, "items", None)
                                            or getattr(resp, "ratings", None)):
                    raise AssertionError(f"{name} at {n}: empty answer")
                reps = REPS if name != "stats" else max(10, REPS // 4)
                lat = await _time(call, reps)
                out[f"fbread_{name}_{n}_p50_ms"] = statistics.median(lat)
                out |= tail(f"fbread_{name}_{n}", lat)  # 60 calls: a max, not a p99
        lo, hi = SIZES[0], SIZES[-1]
        for name in ("list", "list_status_instance", "list_text", "recent_text", "stats", "ratings"):
            out[f"fbread_{name}_{hi}_vs_{lo}"] = out[f"fbread_{name}_{hi}_p50_ms"] / out[f"fbread_{name}_{lo}_p50_ms"]
    finally:
        await ch.close()
        await stop_services(procs)
    return out
