"""`servepack compare BASE CANDIDATE`: a candidate run against a baseline run, a decision (PROMOTE / DO_NOT_PROMOTE /
INCONCLUSIVE) by the pack's promotion metrics. A run against a registry record is judged by `reproduce.verdict`, the
one run-vs-record judgement `reproduce` and the report use too."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servepack.bench.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, median, quantile
from servepack.errors import UsageError
from servepack.packs.schema import Pack
from servepack.records.claims import RunView, load_run, metric_samples

Decision = Literal["PROMOTE", "DO_NOT_PROMOTE", "INCONCLUSIVE"]
Verdict = Literal["better", "worse", "within noise", "no samples"]
# The promotion metrics of a pack, each read from the per-request field that carries it.
METRICS = ("decode_tok_s", "prefill_tok_s", "ttft_ms")
LOWER_IS_BETTER = frozenset({"ttft_ms"})


@dataclass(frozen=True)
class RatioCI:
    """Candidate median ÷ baseline median, with a percentile-bootstrap 95% interval."""

    ratio: float
    low: float
    high: float
    base_median: float
    cand_median: float
    base_n: int
    cand_n: int


def ratio_ci(
    base: Sequence[float], cand: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> RatioCI:
    """Resample each run's samples independently; the ratio of medians, 2.5th and 97.5th percentiles."""
    if not base or not cand:
        raise ValueError("ratio of medians needs samples on both sides")
    b_med, c_med = median(base), median(cand)
    if b_med == 0:
        raise ValueError("baseline median is zero")
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        b = median(rng.choices(list(base), k=len(base)))
        c = median(rng.choices(list(cand), k=len(cand)))
        if b:
            ratios.append(c / b)
    ratios.sort()
    return RatioCI(c_med / b_med, quantile(ratios, 0.025), quantile(ratios, 0.975), b_med, c_med,
                   len(base), len(cand))


def verdict(metric: str, ci: RatioCI | None) -> Verdict:
    """Better or worse only when the whole interval lies on one side of 1."""
    if ci is None:
        return "no samples"
    up, down = ci.low > 1.0, ci.high < 1.0
    if metric in LOWER_IS_BETTER:
        up, down = down, up
    return "better" if up else "worse" if down else "within noise"


@dataclass(frozen=True)
class MetricComparison:
    cell: str
    metric: str
    source: str
    ci: RatioCI | None
    verdict: Verdict
    promotion: bool

    def as_dict(self) -> dict[str, Any]:
        ci = self.ci
        return {
            "cell": self.cell, "metric": self.metric, "source": self.source, "verdict": self.verdict,
            "promotion_metric": self.promotion,
            "ratio": ci.ratio if ci else None, "ci95": [ci.low, ci.high] if ci else None,
            "base_median": ci.base_median if ci else None, "cand_median": ci.cand_median if ci else None,
            "base_n": ci.base_n if ci else 0, "cand_n": ci.cand_n if ci else 0,
        }


@dataclass(frozen=True)
class Comparison:
    base: str
    cand: str
    decision: Decision
    reasons: tuple[str, ...]
    differences: tuple[str, ...]
    metrics: tuple[MetricComparison, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"base": self.base, "candidate": self.cand, "decision": self.decision,
                "reasons": list(self.reasons), "differences": list(self.differences),
                "metrics": [m.as_dict() for m in self.metrics]}


def differences(base: RunView, cand: RunView) -> list[str]:
    """What differs between the two runs besides the preset, stated before any number."""
    b, c = base.receipt, cand.receipt
    out = []
    if b.hardware.attributed_id != c.hardware.attributed_id:
        out.append(f"hardware differs: {b.hardware.attributed_id} vs {c.hardware.attributed_id}")
    be, ce = b.engine, c.engine
    if be and ce and (be.sha256 != ce.sha256):
        out.append(f"engine binary differs: {be.version_text.strip()[:60]} ({be.sha256[:12]}…) vs "
                   f"{ce.version_text.strip()[:60]} ({ce.sha256[:12]}…)")
    if b.model and c.model and b.model.sha256 != c.model.sha256:
        out.append(f"model differs: {b.model.sha256[:12]}… vs {c.model.sha256[:12]}…")
    if b.pack.id != c.pack.id:
        out.append(f"pack differs: {b.pack.id} vs {c.pack.id}")
    bp = b.preset.name if b.preset else "?"
    cp = c.preset.name if c.preset else "?"
    out.append(f"preset: {bp} (baseline) vs {cp} (candidate)")
    return out


def _decide(rows: list[MetricComparison], promotion: list[str]) -> tuple[Decision, list[str]]:
    promo = [r for r in rows if r.promotion]
    if not promo:
        return "INCONCLUSIVE", [f"no shared cell carries samples of the promotion metrics {promotion}"]
    worse = [r for r in promo if r.verdict == "worse"]
    if worse:
        return "DO_NOT_PROMOTE", [_reason(r) for r in worse]
    if all(r.verdict == "better" for r in promo):
        return "PROMOTE", [_reason(r) for r in promo]
    return "INCONCLUSIVE", [_reason(r) for r in promo if r.verdict != "better"] + [
        "PROMOTE needs every promotion metric better beyond its 95% interval in every shared cell"
    ]


def _reason(r: MetricComparison) -> str:
    if r.ci is None:
        return f"{r.cell} {r.metric} ({r.source}): no samples on one side"
    ci = r.ci
    return (f"{r.cell} {r.metric} ({r.source}): {r.verdict}, ×{ci.ratio:.3f} "
            f"[95% CI {ci.low:.3f}–{ci.high:.3f}] ({ci.base_median:.2f} → {ci.cand_median:.2f}, "
            f"n={ci.base_n}/{ci.cand_n})")


def compare_views(base: RunView, cand: RunView, pack: Pack) -> Comparison:
    """Per shared cell and metric: ratio of medians with a bootstrap CI, then the pack's decision rule."""
    source = pack.claims.headline.source
    promotion: list[str] = list(pack.claims.promotion_metrics)
    base_cells, cand_cells = base.cells(), cand.cells()
    shared = sorted(set(base_cells) & set(cand_cells))
    if not shared:
        raise UsageError(
            f"{cand.path}: no bench cell in common with {base.path} "
            f"(baseline {sorted(base_cells)}, candidate {sorted(cand_cells)}); run both with the same marks"
        )
    rows = []
    for key in shared:
        label = f"{key[0]} ctx × {key[2]} gen @c{key[1]}"
        for metric in METRICS:
            b = metric_samples(base, key, metric, source)
            c = metric_samples(cand, key, metric, source)
            ci = ratio_ci(b, c) if b and c else None
            rows.append(MetricComparison(label, metric, _source_name(metric, source), ci, verdict(metric, ci),
                                         metric in promotion))
    decision, reasons = _decide(rows, promotion)
    return Comparison(str(base.path), str(cand.path), decision, tuple(reasons), tuple(differences(base, cand)),
                      tuple(rows))


def _source_name(metric: str, source: str) -> str:
    return "client" if metric == "ttft_ms" else source


def compare_runs(base_dir: Path, cand_dir: Path, pack: Pack) -> Comparison:
    """Two results directories of the same pack → PROMOTE / DO_NOT_PROMOTE / INCONCLUSIVE with reasons."""
    return compare_views(load_run(base_dir), load_run(cand_dir), pack)
