"""Every bench module runs (`python -m tests.bench.run --smoke MODULE`: its `SMOKE` sizes, seconds
each), so a broken bench shows in `make test`, not first in `make bench`: the run exits 0, its file
holds one run with its metadata, and each figure is of that run, a finite non-negative number (or a
name), the module's named figures among them. Sizes this small measure nothing; no floor is checked."""
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
    "feed": {"feed_latency_1_subscriber_p50_ms", "feed_latency_1_subscriber_max_ms", "rating_put_outbox_ratio"},
    "feedback_reads": {"fbread_list_10000_p50_ms", "fbread_list_10000_max_ms", "fbread_stats_10000_p50_ms"},
    "grpcweb": {"grpcweb_overhead_p50_ms"},
    "quota": {"quota_quiet_max_ms", "quota_flood_other_max_ms", "quota_flood_p99_ratio"},
    "settle": {"capture_settle_after_kill_s", "capture_settle_bound_s"},
    "span_stores": {"span_store_pg_ingest_spans_per_s", "span_store_ch_ingest_spans_per_s",
                    "span_store_ch_get_trace_p50_ms", "span_store_ch_search_14d_rare_p50_ms",
                    "span_store_ch_search_1d_common_p50_ms", "span_store_ch_vs_pg_bytes"},
}
NAMES = {"retention_days_filesystem", "phoenix_version"}  # figures that are names, not numbers


def test_every_bench_module_has_a_smoke_run():
    modules = sorted(p.stem.removeprefix("bench_") for p in (PROJECT_ROOT / "tests" / "bench").glob("bench_*.py"))
    assert modules == sorted(NAMED)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("module", sorted(NAMED))
def test_the_bench_module_runs_at_tiny_sizes_and_reports_its_figures(module, tmp_path):
    out = tmp_path / "results.json"
    r = subprocess.run([sys.executable, "-m", "tests.bench.run", "--smoke", "--out", str(out), module],
                       cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=540, check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    doc = json.loads(out.read_text())
    run, figures = doc["run"], doc["figures"]
    assert run["smoke"] and run["modules"] == [f"bench_{module}"] and run["failed"] == [] and not run["complete"]
    assert run["id"] and run["start"] <= run["end"] and len(run["commit"].split("+")[0]) == 40
    assert run["loadavg_1m_start"] >= 0 and run["loadavg_1m_end"] >= 0
    assert NAMED[module] <= figures.keys(), sorted(NAMED[module] - figures.keys())
    for name, fig in figures.items():
        assert fig["run"] == run["id"] and fig["module"] == f"bench_{module}", name
        v = fig["value"]
        if name in NAMES:
            assert isinstance(v, str) and v, name
        else:
            assert isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, (name, v)
