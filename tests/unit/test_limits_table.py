"""scripts/limits_table.py prints deploy/README.md's table from one bench run only: a file whose
figures are not all of its run, a smoke run or the old flat format (figures without a run) is refused."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from services.common.settings import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "limits_table.py"
_spec = importlib.util.spec_from_file_location("limits_table", SCRIPT)
limits_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(limits_table)

RUN = {"id": "r1", "start": "2026-12-01T15:11:00+00:00", "end": "2026-12-01T15:30:00+00:00", "commit": "a" * 40,
       "loadavg_1m_start": 0.4, "loadavg_1m_end": 0.6, "modules": ["bench_chat"], "failed": [], "complete": True,
       "smoke": False}


def _doc(**figures: tuple[float, str]) -> dict:
    return {"run": RUN, "figures": {k: {"value": v, "run": r, "module": "bench_chat"} for k, (v, r) in figures.items()}}


def test_one_runs_figures_make_a_table_under_a_line_naming_the_run(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_doc(turn_overhead_p50_ms=(1.5, "r1"), turn_floor_p50_ms=(1.0, "r1"))))
    r = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, check=True)
    first, _, *table = r.stdout.splitlines()
    assert first.startswith("Figures of bench run `r1`, the whole `make bench`") and "`aaaaaaaaaaaa`" in first
    assert "0.4 at the start, 0.6 at the end" in first
    row = next(line for line in table if line.startswith("| `turn_overhead_p50_ms`"))
    assert "1.50 / ? ms" in row and "floor 1.00 ms" in row


@pytest.mark.parametrize("doc,why", [
    (_doc(turn_overhead_p50_ms=(1.5, "r1"), turn_floor_p50_ms=(1.0, "r0")), "figures not of run r1: turn_floor_p50_ms"),
    ({"turn_overhead_p50_ms": 1.5}, "no run metadata"),
    ({"run": {**RUN, "smoke": True}, "figures": {}}, "is a smoke run"),
])
def test_a_file_mixing_runs_or_without_one_is_refused(tmp_path, doc, why):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and r.stdout == "" and why in r.stderr
    with pytest.raises(limits_table.MixedRuns, match=why):
        limits_table.one_run(doc)
