-- day_trigrams (migration 0017) is ≈ 100 µs a call over a realistic body (show_trgm plus the keys),
-- and PostgreSQL's default guess for a SQL function is 100 × cpu_operator_cost: with a month of days
-- in a search (≈ 28 `@>` conditions at 100k reports) it found walking the time index newest first and
-- computing the keys of every row it meets cheaper than the index (571 ms p50 in
-- tests/bench/bench_feedback_reads.py). Its true cost keeps step 2 on the day-keyed indexes.
ALTER FUNCTION day_trigrams(timestamptz, text) COST 10000;
