"""`make bench`: run every `tests/bench/bench_*.py` module's `async def run(ctx) -> dict[str, float]`
and write this run, and only this run, to `.bench/results.json`:

    {"run": {"id", "start" (UTC ISO 8601), "end", "commit" (HEAD, "+dirty" when the tree differs),
             "loadavg_1m_start", "loadavg_1m_end", "modules" (asked), "failed" (modules that raised),
             "complete" (every bench module ran and none failed), "smoke"},
     "figures": {name: {"value": v, "run": run id, "module": "bench_x"}}}

The file is replaced, never merged: it is rewritten after each module (so an interrupted run leaves
its own figures, marked incomplete) and a previous run's figures are gone from the start.
`scripts/limits_table.py` refuses a file whose figures do not all carry its run's id.

`ctx` is a BenchContext with `pg_url` (a fresh embedded PostgreSQL for the whole run) and
`new_database()` (an empty database per benchmark). Run some: `python -m tests.bench.run chat feedback`.
A smoke run (`--smoke`, what `make test` runs: tests/integration/test_bench_smoke.py) sets each module's
size constants to its `SMOKE` dict (a handful of calls: seconds a module) and writes
`.bench/smoke-results.json` (or `--out PATH`), never the real results.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib
import json
import os
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from services.common.db import start_embedded_postgres
from tests.stack import no_default_metrics_ports

no_default_metrics_ports()  # the benches' services inherit this environment (bench_settle's did: 946x taken)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".bench" / "results.json"
SMOKE_OUT = ROOT / ".bench" / "smoke-results.json"
MODULES = sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))


@dataclass
class BenchContext:
    pg_url: str
    tmp: Path
    smoke: bool = False

    async def new_database(self) -> str:
        name = f"bench_{uuid.uuid4().hex[:10]}"
        conn = await asyncpg.connect(self.pg_url)
        await conn.execute(f'CREATE DATABASE "{name}"')
        await conn.close()
        head, sep, query = self.pg_url.partition("?")
        return f"{head.rsplit('/', 1)[0]}/{name}{sep}{query}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _write(out: Path, run: dict, figures: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"run": run, "figures": figures}, indent=2, sort_keys=True) + "\n")
    tmp.replace(out)  # one run in the file at any time, never half a write


async def main(only: list[str], smoke: bool = False, out: Path = OUT) -> int:
    unknown = [m for m in only if f"bench_{m}" not in MODULES]
    if unknown:
        raise SystemExit(f"no bench module {unknown}; modules: {[m.removeprefix('bench_') for m in MODULES]}")
    chosen = [m for m in MODULES if not only or m.removeprefix("bench_") in only]
    run = {"id": uuid.uuid4().hex[:12], "start": _now(), "end": None, "commit": _commit(),
           "loadavg_1m_start": round(os.getloadavg()[0], 2), "loadavg_1m_end": None, "modules": chosen,
           "failed": [], "complete": False, "smoke": smoke}
    figures: dict[str, dict] = {}
    _write(out, run, figures)  # the previous run's figures are gone now, whatever happens next
    print(f"bench run {run['id']} at {run['commit'][:12]}, load {run['loadavg_1m_start']}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="af-bench-"))
    ctx = BenchContext(pg_url=start_embedded_postgres(tmp / "pg", cleanup_mode="delete"), tmp=tmp, smoke=smoke)
    for mod in chosen:
        t0 = time.perf_counter()
        print(f"== {mod}", flush=True)
        try:
            module = importlib.import_module(f"tests.bench.{mod}")
            if smoke:
                for name, small in module.SMOKE.items():
                    assert hasattr(module, name), f"{mod}.SMOKE names {name}, which it does not define"
                    setattr(module, name, small)
            got = await module.run(ctx)
        except Exception as e:  # noqa: BLE001 - report and continue with the other benchmarks
            print(f"   FAILED: {e!r}", flush=True)
            run["failed"].append(mod)
            _write(out, run, figures)
            continue
        for k, v in got.items():
            print(f"   {k} = {v:.3f}" if isinstance(v, float) else f"   {k} = {v}", flush=True)
            figures[k] = {"value": v, "run": run["id"], "module": mod}
        print(f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
        _write(out, run, figures)
    run.update(end=_now(), loadavg_1m_end=round(os.getloadavg()[0], 2),
               complete=chosen == MODULES and not run["failed"])
    _write(out, run, figures)
    print(f"wrote {out} (run {run['id']}, {'complete' if run['complete'] else 'partial'})")
    return 1 if run["failed"] else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="make bench: every tests/bench/bench_*.py module, or the ones named")
    ap.add_argument("modules", nargs="*", help="module names without bench_ (default: all)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the bench code runs, measures nothing")
    ap.add_argument("--out", type=Path, help=f"results file (default {OUT.relative_to(ROOT)}; a smoke run: "
                                             f"{SMOKE_OUT.relative_to(ROOT)}, never the real results)")
    a = ap.parse_args()
    raise SystemExit(asyncio.run(main(a.modules, a.smoke, a.out or (SMOKE_OUT if a.smoke else OUT))))
