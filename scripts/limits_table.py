"""Print deploy/README.md's "Measured single-machine limits" table from `.bench/results.json` (the
one run the last `make bench` wrote, tests/bench/run.py), each figure next to its floor or baseline
from the same run, under a line naming that run (id, start, commit, load average, complete or not).

Usage: python scripts/limits_table.py [--write] [results.json]   (--write replaces the table in
deploy/README.md: its run line and the lines from its `| figure |` header to the first line that is not
a table row). A figure missing from the results shows as "not measured".
Refused (exit status 2, one line saying why): a file without its run's metadata (the flat format of
before, whose figures carried no run), a figure of another run than the file's, a smoke run.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "deploy" / "README.md"
SECTION = "## Measured single-machine limits"

# (figures shown as value, unit, floor/baseline template, meaning). Templates use {key} of the results
# (formatted with _fmt); a row whose value keys are all missing says "not measured".
ROWS: list[tuple[list[str], str, str, str]] = [
    (["collector_ingest_spans_per_s"], "spans/s",
     "COPY ceiling {copy_ceiling_rows_per_s} rows/s ({ingest_vs_copy_ceiling}×, rounds "
     "{ingest_vs_copy_ceiling_min}–{ingest_vs_copy_ceiling_max}); Phoenix {phoenix_version} on the same payloads, "
     "alternated: acknowledged {phoenix_ingest_spans_per_s}, committed {phoenix_committed_spans_per_s} spans/s "
     "(ours {collector_same_payloads_spans_per_s}: {ingest_vs_phoenix}× / {ingest_vs_phoenix_committed}×)",
     "OTLP/gRPC Exports of 1000 realistic spans, 4 clients, acknowledged after commit; the ceiling is COPY into "
     "the same schema with the same indexes (attribute GIN included)"),
    (["get_trace_p50_ms", "get_trace_p99_ms"], "ms", "",
     "GetTrace p50 / p99 with {get_trace_spans_stored} spans over 15 daily partitions"),
    (["search_1h_turns_p50_ms", "search_1d_attr_p50_ms", "search_14d_rare_attr_p50_ms"], "ms",
     "one-statement scan (before the attribute index): {search_1d_attr_full_scan_ms} / "
     "{search_14d_rare_attr_full_scan_ms} ms",
     "SearchTraces first page on the same spans: the last hour of one service's `chat.turn`; a day of a "
     "common attribute value; all 14 days for one rare value (targets ≤ 50 / ≤ 100 ms p50)"),
    (["retention_drop_day_ms", "retention_drop_big_day_ms"], "ms",
     "detach alone {retention_detach_day_ms} / {retention_detach_big_day_ms} ms; big ÷ small "
     "{retention_drop_big_vs_small}× (detach {retention_detach_big_vs_small}×); the DROP frees "
     "{retention_drop_day_mb} / {retention_drop_big_day_mb} MB at {retention_drop_day_ms_per_mb} / "
     "{retention_drop_big_ms_per_mb} ms per MB; floor: the filesystem unlinking files of the same sizes "
     "{retention_unlink_floor_day_ms} / {retention_unlink_floor_big_day_ms} ms ({retention_unlink_floor_big_vs_small}×); "
     "the days' files on {retention_days_filesystem}",
     "dropping one day of {retention_drop_day_spans} / {retention_drop_big_day_spans} spans while Exports run"),
    (["export_max_ms", "export_during_retention_max_ms"], "ms", "{export_max_retention_vs_baseline}× the max without a pass",
     "Export (1000 spans) slowest of {export_samples_per_phase} without / during retention passes (too few for a p99)"),
    (["turn_overhead_p50_ms", "turn_overhead_p99_ms"], "ms", "floor {turn_floor_p50_ms} ms ({turn_overhead_vs_floor}×)",
     "chat gateway time per turn minus the agent's own time: SendMessage without a request id"),
    (["turn_stream_rid_overhead_p50_ms", "turn_stream_rid_overhead_p99_ms"], "ms", "SendMessage {turn_overhead_p50_ms} ms",
     "the same on the console's path: StreamMessage with a request id (the request ledger's statements)"),
    (["feedback_create_p50_ms", "feedback_create_p99_ms"], "ms", "chat GetMessage {feedback_chat_getmessage_p50_ms} ms",
     "CreateFeedback including the snapshot fetch from the chat service, 1 client"),
    (["rating_put_per_s"], "puts/s", "floor {rating_put_floor_per_s} puts/s ({rating_put_vs_floor}×)",
     "PutRating with request ids, 4 clients on their own connections, each re-rating one turn (ownership cached)"),
    (["rating_first_put_per_s"], "puts/s", "p50 {rating_first_put_p50_ms} ms, p99 {rating_first_put_p99_ms} ms",
     "first ratings of 1000 distinct turns, 4 clients (every put asks the chat service who owns the turn)"),
    (["fbread_list_1000000_p50_ms", "fbread_list_text_1000000_p50_ms", "fbread_list_status_instance_1000000_p50_ms"],
     "ms", "at 10k: {fbread_list_10000_p50_ms} / {fbread_list_text_10000_p50_ms} / "
     "{fbread_list_status_instance_10000_p50_ms} ms",
     "a heavy owner's ListFeedback at 1M reports: no filter / text search / status + instance (p50)"),
    (["fbread_recent_text_1000000_p50_ms", "fbread_ratings_1000000_p50_ms"], "ms",
     "at 10k: {fbread_recent_text_10000_p50_ms} / {fbread_ratings_10000_p50_ms} ms",
     "admin ListRecentFeedback text search, ListRatings of a conversation, at 1M reports / 10M ratings (p50)"),
    (["fbread_stats_1000000_p50_ms"], "ms", "at 10k: {fbread_stats_10000_p50_ms} ms",
     "GetFeedbackStats over 30 days at 1M reports / 10M ratings (p50)"),
    (["grpcweb_overhead_p50_ms"], "ms", "", "gRPC-web through Envoy vs native gRPC to the service"),
    (["quota_quiet_p99_ms", "quota_flood_other_p99_ms"], "ms", "{quota_flood_p99_ratio}× quiet",
     "another owner's write p99 without / during one owner's flood (per-owner write quota on)"),
    (["feed_latency_1_subscriber_p50_ms", "feed_latency_1_subscriber_p99_ms",
      "feed_latency_100_subscribers_p50_ms", "feed_latency_100_subscribers_p99_ms"], "ms", "",
     "change feed end to end: a rating's commit to its WatchFeedback event, 1 subscriber / 100 subscribers "
     "(p50 / p99)"),
    (["rating_put_outbox_ratio"], "×", "with the outbox {rating_put_with_outbox_per_s} puts/s, without "
     "{rating_put_without_outbox_per_s} puts/s", "PutRating with the change feed's outbox triggers on ÷ off, "
     "alternated in the same run (issue 24's target ≥ 0.95)"),
    (["span_store_pg_ingest_spans_per_s", "span_store_ch_ingest_spans_per_s"], "spans/s",
     "ClickHouse ÷ PostgreSQL {span_store_ch_vs_pg_ingest}×",
     "span store ingest, PostgreSQL / ClickHouse (chdb in-process standing in for a server), the same "
     "OTLP/gRPC Exports of 1000 spans, 4 clients (issue 26's target ≥ 2×)"),
    (["span_store_pg_bytes_per_span", "span_store_ch_bytes_per_span"], "bytes",
     "ClickHouse ÷ PostgreSQL {span_store_ch_vs_pg_bytes}×",
     "bytes per span on disk with indexes, PostgreSQL / ClickHouse (target ≤ 0.3×)"),
    (["span_store_pg_get_trace_p99_ms", "span_store_ch_get_trace_p99_ms"], "ms",
     "p50 {span_store_pg_get_trace_p50_ms} / {span_store_ch_get_trace_p50_ms} ms; chdb floor (SELECT 1) p50 "
     "{span_store_ch_select1_p50_ms} ms, p99 {span_store_ch_select1_p99_ms} ms",
     "GetTrace p99 over {span_store_pg_spans} spans in 14 days, PostgreSQL / ClickHouse (target ≤ 10 ms)"),
    (["span_store_pg_search_14d_rare_p50_ms", "span_store_ch_search_14d_rare_p50_ms",
      "span_store_pg_search_1d_common_p50_ms", "span_store_ch_search_1d_common_p50_ms"], "ms", "",
     "SearchTraces first page: a rare attribute over 14 days (PostgreSQL / ClickHouse), a common one over "
     "1 day (PostgreSQL / ClickHouse), p50 (target ≤ 50 ms)"),
]


def _fmt(v: object) -> str:
    if not isinstance(v, (int, float)):
        return str(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


class _Results(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def table(results: dict[str, float]) -> list[str]:
    r = _Results({k: _fmt(v) for k, v in results.items()})
    out = ["| figure | value | floor / baseline (same run) | meaning |", "|---|---|---|---|"]
    for keys, unit, floor, meaning in ROWS:
        vals = [r[k] for k in keys]
        value = "not measured" if all(v == "?" for v in vals) else " / ".join(vals) + f" {unit}"
        out.append(f"| {' / '.join(f'`{k}`' for k in keys)} | {value} | {floor.format_map(r)} | {meaning.format_map(r)} |")
    return out


RUN_LINE = "Figures of bench run "


class MixedRuns(ValueError):
    """The results are not one whole run's (see the module docstring)."""


def one_run(doc: dict) -> tuple[dict, dict[str, float]]:
    """(the run's metadata, {figure: value}) of a results file; MixedRuns when its figures are not all
    of its one run, or it is a smoke run or has no run metadata."""
    run, figures = doc.get("run"), doc.get("figures")
    if not isinstance(run, dict) or not isinstance(figures, dict) or not run.get("id"):
        raise MixedRuns("no run metadata (id, start, commit, load): rerun `make bench` to get one run's figures")
    if run.get("smoke"):
        raise MixedRuns(f"run {run['id']} is a smoke run (tiny sizes): its figures measure nothing")
    other = sorted(k for k, f in figures.items() if not isinstance(f, dict) or f.get("run") != run["id"])
    if other:
        raise MixedRuns(f"figures not of run {run['id']}: {', '.join(other[:10])}")
    return run, {k: f["value"] for k, f in figures.items()}


def run_line(run: dict) -> str:
    """The line above the table naming the run its figures come from."""
    whole = "the whole `make bench`" if run.get("complete") else (
        f"a partial run (modules {', '.join(run.get('modules') or [])}"
        + (f"; failed: {', '.join(run['failed'])}" if run.get("failed") else "") + ")")
    return (f"{RUN_LINE}`{run['id']}`, {whole}: {run.get('start')} to {run.get('end') or 'interrupted'} UTC, "
            f"commit `{str(run.get('commit'))[:12]}`, 1-minute load average {run.get('loadavg_1m_start')} at "
            f"the start, {run.get('loadavg_1m_end')} at the end.")


def write(lines: list[str]) -> None:
    text = README.read_text().splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith(SECTION))
    head = next(i for i in range(start, len(text)) if text[i].startswith("| figure |"))
    if head >= 2 and text[head - 2].startswith(RUN_LINE) and not text[head - 1].strip():
        head -= 2  # the run line of the table it replaces
    end = head + (2 if text[head].startswith(RUN_LINE) else 0)
    while end < len(text) and text[end].startswith("|"):
        end += 1
    README.write_text("\n".join(text[:head] + lines + text[end:]) + "\n")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--write"]
    try:
        run, results = one_run(json.loads(Path(args[0] if args else ROOT / ".bench" / "results.json").read_text()))
    except MixedRuns as e:
        print(f"limits_table: refused: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    lines = [run_line(run), "", *table(results)]
    if "--write" in sys.argv:
        write(lines)
    else:
        print("\n".join(lines))
