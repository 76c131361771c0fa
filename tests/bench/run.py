"""`make bench`: run every `tests/bench/bench_*.py` module's `async def run(ctx) -> dict[str, float]`
and write the merged figures to `.bench/results.json` (a flat JSON object of named figures).

`ctx` is a BenchContext with `pg_url` (a fresh embedded PostgreSQL for the whole run) and
`new_database()` (an empty database per benchmark). Run one module: `python -m tests.bench.run chat`.
"""
from __future__ import annotations

import asyncio
import importlib
import json
import sys
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


@dataclass
class BenchContext:
    pg_url: str
    tmp: Path

    async def new_database(self) -> str:
        name = f"bench_{uuid.uuid4().hex[:10]}"
        conn = await asyncpg.connect(self.pg_url)
        await conn.execute(f'CREATE DATABASE "{name}"')
        await conn.close()
        head, sep, query = self.pg_url.partition("?")
        return f"{head.rsplit('/', 1)[0]}/{name}{sep}{query}"


async def main(only: list[str]) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="af-bench-"))
    ctx = BenchContext(pg_url=start_embedded_postgres(tmp / "pg", cleanup_mode="delete"), tmp=tmp)
    results: dict[str, float] = json.loads(OUT.read_text()) if OUT.exists() else {}
    modules = sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))
    failed = 0
    for mod in modules:
        if only and mod.removeprefix("bench_") not in only:
            continue
        t0 = time.perf_counter()
        print(f"== {mod}", flush=True)
        try:
            figures = await importlib.import_module(f"tests.bench.{mod}").run(ctx)
        except Exception as e:  # noqa: BLE001 - report and continue with the other benchmarks
            print(f"   FAILED: {e!r}", flush=True)
            failed += 1
            continue
        for k, v in figures.items():
            print(f"   {k} = {v:.3f}" if isinstance(v, float) else f"   {k} = {v}", flush=True)
        results.update(figures)
        print(f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
