"""Order statistics, a seeded bootstrap confidence interval of the median, and the sequential stopping rule.

Below `MIN_INTERVAL_N` samples there is no interval: a bootstrap of 3 values only returns their range, which is
not a 95% interval of anything. `Stat.ci_note` then says "too few for an interval".
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from servepack.strict import Strict

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240917
P99_MIN_N = 100
MIN_INTERVAL_N = 5


class Stat(Strict):
    """One metric over a cell's samples; values are None when there are no samples."""

    n: int
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    ci_note: str | None = Field(None, description="why there is no interval (too few samples)")

    @property
    def half_width_pct(self) -> float | None:
        """Half the 95% interval as a percentage of the median (±x%), or None without an interval."""
        return half_width_pct(self)

    def interval_text(self, digits: int = 2) -> str:
        """'95% CI a–b (±x%)', or the reason there is none; never min–max dressed as an interval."""
        if self.ci95_low is None or self.ci95_high is None:
            return self.ci_note or ("no samples" if self.n == 0 else too_few(self.n))
        hw = self.half_width_pct
        return (f"95% CI {self.ci95_low:,.{digits}f}–{self.ci95_high:,.{digits}f}"
                + (f" (±{hw:.1f}%)" if hw is not None else ""))


def too_few(n: int) -> str:
    return f"too few for an interval (n={n} < {MIN_INTERVAL_N})"


def half_width_pct(stat: Stat) -> float | None:
    if stat.ci95_low is None or stat.ci95_high is None or not stat.median:
        return None
    return (stat.ci95_high - stat.ci95_low) / 2 / abs(stat.median) * 100


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


def describe(values: Sequence[float | None], *, seed: int = BOOTSTRAP_SEED, ci: bool = True) -> Stat:
    """Median, p10/p90, p99 (only when n ≥ 100), min/max and the bootstrap CI of the median (only when n ≥ 5).

    `ci=False` leaves the interval out: its resampling costs O(n × 2,000), seconds of CPU for the thousands of
    gaps of a large load point, and a caller that reads only the quantiles need not pay it."""
    data = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    if not data:
        return Stat(n=0)
    low: float | None
    high: float | None
    if not ci:
        low, high, note = None, None, "interval not computed (quantiles only)"
    elif len(data) >= MIN_INTERVAL_N:
        low, high = bootstrap_median_ci(data, seed=seed)
        note = None
    else:
        low, high, note = None, None, too_few(len(data))
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
        ci_note=note,
    )


# "host contended" and "stalled" were the stops of a cell with a spoiled sample before samples were set aside and
# replaced; kept so those records read. "sample budget": too many samples set aside (see BenchSettings).
StopReason = Literal["target met", "max samples", "max time", "fixed count", "stopped early", "no metric samples",
                     "sample budget", "host contended", "stalled"]


class Interval(Strict):
    """How tight a cell's headline metric got, and why sampling stopped (the sequential rule's outcome)."""

    metric: str = Field(description="the Cell field judged (the pack's headline metric)")
    target_pct: float | None = Field(description="the pack's target: ±x% of the median (claims.interval_target_pct)")
    n: int
    half_width_pct: float | None = Field(description="achieved: half the 95% interval ÷ median × 100")
    met: bool
    stopped_by: StopReason
    note: str


def interval_report(stat: Stat, metric: str, target_pct: float | None, stopped_by: StopReason) -> Interval:
    """The achieved width against the target, worded for people: never an interval from fewer than 5 samples."""
    hw = half_width_pct(stat)
    met = target_pct is not None and hw is not None and hw <= target_pct
    target = f"target ±{target_pct:g}%" if target_pct is not None else "no target"
    if stat.n == 0:
        note = f"no {metric} samples"
    elif hw is None:
        note = f"{too_few(stat.n) if stat.n < MIN_INTERVAL_N else 'no interval'} ({target})"
    else:
        note = f"±{hw:.1f}% from {stat.n} samples ({target}{'' if met or target_pct is None else ' not met'})"
    return Interval(metric=metric, target_pct=target_pct, n=stat.n, half_width_pct=None if hw is None else round(hw, 3),
                    met=met, stopped_by=stopped_by, note=f"{note}; stopped: {stopped_by}")


def keep_sampling(stat: Stat, *, target_pct: float | None, rounds: int, min_rounds: int, max_rounds: int,
                  elapsed_s: float, max_s: float) -> StopReason | None:
    """The sequential rule: None to take another round, else why to stop.

    At least `min_rounds`; then stop when the 95% interval of the median is within ±target_pct of the median
    (needs n ≥ 5), or at `max_rounds`, or once `max_s` has passed.
    """
    if rounds < min_rounds:
        return None
    if target_pct is None or max_rounds <= min_rounds:
        return "fixed count"
    if stat.n == 0:
        return "no metric samples"
    hw = half_width_pct(stat)
    if hw is not None and hw <= target_pct:
        return "target met"
    if rounds >= max_rounds:
        return "max samples"
    if elapsed_s >= max_s:
        return "max time"
    return None
