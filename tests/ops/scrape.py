"""Scraping a service's Prometheus endpoint in tests: `await scrape(port)` → {(name, labels): value}."""
from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(port: int) -> Samples:
    """Every sample of GET http://127.0.0.1:`port`/metrics, keyed by (sample name, label set)."""
    async with httpx.AsyncClient() as client:
        r = await client.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0)
    r.raise_for_status()
    assert r.headers["content-type"].startswith("text/plain"), r.headers["content-type"]
    out: Samples = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels` (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def names(samples: Samples) -> set[str]:
    return {n for n, _ in samples}
