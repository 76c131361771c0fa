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


def value(samples: Samples, name: str, *, missing: float | None = None, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels`. None of them: AssertionError
    naming the metric (a metric that vanished from the endpoint fails the test), unless `missing` is
    given — for a scrape taken *before* traffic, where a labelled counter not yet incremented is
    absent from the exposition and counts as `missing` (0)."""
    want = set(labels.items())
    got = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    if not got:
        if missing is not None:
            return missing
        raise AssertionError(f"no sample {name}{labels or ''} in the scrape (exported: "
                             f"{sorted({n for n, _ in samples if n.split('_')[0] == name.split('_')[0]})[:20]})")
    return sum(got)


def names(samples: Samples) -> set[str]:
    return {n for n, _ in samples}
