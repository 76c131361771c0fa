"""Every bench module runs (`python -m tests.bench.run --smoke MODULE...`: its `SMOKE` sizes), so a broken
bench shows in `make test`, not first in `make bench`: the module is not among the run's failed, the run's
file holds one finished run with its metadata, and each of the module's figures is of that run, a finite
non-negative number (or a name), its named figures among them. Sizes this small measure nothing; no floor
is checked.

The modules run as GROUPS: one `tests.bench.run` process (one embedded PostgreSQL, one interpreter) per
group, the groups at the same time (much of a smoke run waits: on servers starting, captures settling,
quota windows), so the whole costs about its longest group, not nine processes one after another."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from services.common.settings import PROJECT_ROOT

# Figures each module must report (a few per module: the ones deploy/README.md's table reads).
NAMED = {
    "chat": {"turn_overhead_p50_ms", "turn_stream_rid_overhead_p50_ms", "turn_floor_p50_ms", "turn_overhead_max_ms",
             "turn_stream_rid_overhead_max_ms"},
    "collector": {"collector_ingest_spans_per_s", "copy_ceiling_rows_per_s", "get_trace_p50_ms", "get_trace_max_ms",
                  "search_1d_attr_p50_ms", "retention_drop_day_ms", "export_max_ms", "export_during_retention_max_ms"},
    "feedback": {"feedback_create_p50_ms", "feedback_create_max_ms", "rating_put_per_s", "rating_put_floor_per_s",
                 "rating_first_put_per_s", "rating_first_put_max_ms"},
    "floor_designs": {"floor_design_create_shipped_max_ms", "floor_design_create_in_insert_max_ms",
                      "floor_design_create_unindexed_p50_ms", "floor_design_put_shipped_per_s",
                      "floor_design_put_grouped_per_s", "floor_design_put_grouped_postgres_cpu_ms"},
    "feed": {"feed_latency_1_subscriber_p50_ms", "feed_latency_1_subscriber_max_ms", "rating_put_outbox_ratio"},
    "feedback_reads": {"fbread_list_10000_p50_ms", "fbread_list_10000_max_ms", "fbread_stats_10000_p50_ms"},
    "grpcweb": {"grpcweb_overhead_p50_ms"},
    "instances": {"instances_activity_p50_ms", "instances_activity_floor_p50_ms", "instances_search_rare_p50_ms",
                  "instances_search_rare_floor_p50_ms", "instances_search_none_p50_ms", "instances_search_uses_trgm"},
    "quota": {"quota_quiet_max_ms", "quota_flood_other_max_ms", "quota_flood_p99_ratio"},
    "settle": {"capture_settle_after_kill_s", "capture_settle_bound_s"},
    "span_stores": {"span_store_pg_ingest_spans_per_s", "span_store_ch_ingest_spans_per_s",
                    "span_store_ch_get_trace_p50_ms", "span_store_ch_search_14d_rare_p50_ms",
                    "span_store_ch_search_1d_common_p50_ms", "span_store_ch_vs_pg_bytes"},
}
NAMES = {"retention_days_filesystem", "phoenix_version"}  # figures that are names, not numbers
# Run side by side, each group's modules one after another; about equal smoke times on a loaded machine.
GROUPS = (("feedback_reads", "feedback", "settle", "chat", "grpcweb", "floor_designs"),
          ("quota", "collector", "feed", "span_stores", "instances"))
RUN_TIMEOUT_S = 1200


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory) -> dict[str, tuple[int, dict, str]]:
    """module → (its group's exit code, results file, output): every group run once, concurrently."""
    out_dir = tmp_path_factory.mktemp("bench-smoke")
    procs = []
    for i, group in enumerate(GROUPS):
        out, log = out_dir / f"results-{i}.json", out_dir / f"run-{i}.log"
        with open(log, "wb") as f:
            procs.append((group, out, log, subprocess.Popen(
                [sys.executable, "-m", "tests.bench.run", "--smoke", "--out", str(out), *group],
                cwd=PROJECT_ROOT, stdout=f, stderr=subprocess.STDOUT)))
    got: dict[str, tuple[int, dict, str]] = {}
    try:
        for group, out, log, proc in procs:
            rc = proc.wait(RUN_TIMEOUT_S)
            doc = json.loads(out.read_text()) if out.exists() else {}
            for m in group:
                got[m] = (rc, doc, log.read_text(errors="replace"))
    finally:
        for *_, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return got


def test_every_bench_module_has_a_smoke_run():
    modules = sorted(p.stem.removeprefix("bench_") for p in (PROJECT_ROOT / "tests" / "bench").glob("bench_*.py"))
    assert modules == sorted(NAMED) == sorted(m for g in GROUPS for m in g)


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)  # the first test waits for the runs (the session fixture)
@pytest.mark.parametrize("module", sorted(NAMED))
def test_the_bench_module_runs_at_tiny_sizes_and_reports_its_figures(module, smoke_runs):
    rc, doc, output = smoke_runs[module]
    group = next(g for g in GROUPS if module in g)
    assert doc, f"no results file: {output[-4000:]}"
    run = doc["run"]
    assert f"bench_{module}" not in run["failed"], output[-4000:]
    assert rc == (1 if run["failed"] else 0), output[-4000:]  # exits 0 unless a module failed
    assert run["smoke"] and run["modules"] == sorted(f"bench_{m}" for m in group) and not run["complete"]
    assert run["id"] and run["end"] and run["start"] <= run["end"] and len(run["commit"].split("+")[0]) == 40
    assert run["loadavg_1m_start"] >= 0 and run["loadavg_1m_end"] >= 0
    figures = {k: f for k, f in doc["figures"].items() if f["module"] == f"bench_{module}"}
    assert NAMED[module] <= figures.keys(), sorted(NAMED[module] - figures.keys())
    for name, fig in figures.items():
        assert fig["run"] == run["id"], name
        v = fig["value"]
        if name in NAMES:
            assert isinstance(v, str) and v, name
        else:
            assert isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, (name, v)
