"""Order statistics and a seeded bootstrap confidence interval of the median."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240917
P99_MIN_N = 100


class Stat(BaseModel):
    """One metric over a cell's samples; values are None when there are no samples."""

    model_config = ConfigDict(extra="forbid")

    n: int
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, R type 7)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def median(values: Sequence[float]) -> float:
    return quantile(sorted(values), 0.5)


def bootstrap_median_ci(
    values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the median; a fixed seed makes it reproducible."""
    data = list(values)
    n = len(data)
    if n == 0:
        raise ValueError("bootstrap of no values")
    if n == 1:
        return data[0], data[0]
    rng = random.Random(seed)
    medians = sorted(median(rng.choices(data, k=n)) for _ in range(resamples))
    return quantile(medians, 0.025), quantile(medians, 0.975)


def describe(values: Sequence[float | None], *, seed: int = BOOTSTRAP_SEED) -> Stat:
    """Median, p10/p90, p99 (only when n ≥ 100), min/max and the bootstrap CI of the median."""
    data = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    if not data:
        return Stat(n=0)
    low, high = bootstrap_median_ci(data, seed=seed)
    return Stat(
        n=len(data),
        median=quantile(data, 0.5),
        p10=quantile(data, 0.10),
        p90=quantile(data, 0.90),
        p99=quantile(data, 0.99) if len(data) >= P99_MIN_N else None,
        min=data[0],
        max=data[-1],
        ci95_low=low,
        ci95_high=high,
    )
