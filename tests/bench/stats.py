"""Percentiles a bench may report: a p99 needs ≥ P99_MIN_SAMPLES samples, else the figure is the
largest sample and is named so (`_max_`): 11 or 60 samples have no 99th percentile, only a maximum."""
from __future__ import annotations

P99_MIN_SAMPLES = 1000


def pct(xs: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `xs`, nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def tail(prefix: str, xs: list[float], unit: str = "ms") -> dict[str, float]:
    """{`prefix`_p99_`unit`: the 99th percentile} from ≥ P99_MIN_SAMPLES samples, else
    {`prefix`_max_`unit`: the largest sample}."""
    if len(xs) >= P99_MIN_SAMPLES:
        return {f"{prefix}_p99_{unit}": pct(xs, 0.99)}
    return {f"{prefix}_max_{unit}": max(xs)}
