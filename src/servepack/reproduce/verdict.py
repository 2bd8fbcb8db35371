"""Is the record's number reproduced here? The facts first (hardware, engine build, model bytes, launch), then a
verdict per metric and cell: REPRODUCED, FASTER, SLOWER or NOT_COMPARABLE, each with its reason.

A metric is REPRODUCED when the run's 95% interval of the median lies inside the record's band: the record's
own spread (its samples' range) joined with ±tolerance around its median. FASTER or SLOWER when the whole
interval lies beyond the band; NOT_COMPARABLE when the facts differ or are unknown, when either side has no
figure, when the run has too few samples for an interval, or when the interval straddles the band's edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from servepack.bench.stats import MIN_INTERVAL_N, Stat
from servepack.reproduce.protocol import RecordFacts, RecordFigure
from servepack.reproduce.translate import Translation

Verdict = Literal["REPRODUCED", "FASTER", "SLOWER", "NOT_COMPARABLE"]
State = Literal["same", "differs", "unknown"]
LOWER_IS_FASTER = frozenset({"ttft_ms"})
DEFAULT_TOLERANCE_PCT = 5.0


@dataclass(frozen=True)
class LocalFacts:
    """This host, engine build and model file, as found (None where not known, with the reason)."""

    hardware_ids: tuple[str, ...]
    hardware_label: str
    engine_version: str | None = None
    engine_sha256: str | None = None
    engine_commit: str | None = None
    engine_unknown: str | None = None
    model_sha256: str | None = None
    model_path: str | None = None
    model_unknown: str | None = None
    model_instance_id: str | None = None
    pack_model_sha256: str | None = None


@dataclass(frozen=True)
class Check:
    """One comparability fact: the record against this host."""

    what: str
    state: State
    detail: str

    def line(self) -> str:
        return f"{self.what}: {self.state.upper()}: {self.detail}"


def _hardware(rec: RecordFacts, here: LocalFacts) -> Check:
    rec_ids = " / ".join(rec.hardware_ids) + (f" ({rec.hardware_label})" if rec.hardware_label else "")
    shown = f"record {rec_ids} vs this host {' / '.join(dict.fromkeys(here.hardware_ids))} ({here.hardware_label})"
    same = bool(set(rec.hardware_ids) & set(here.hardware_ids))
    return Check("hardware", "same" if same else "differs", shown)


def _version(text: str | None) -> str | None:
    if not text:
        return None
    first = text.strip().splitlines()[0]
    return first.split("version:", 1)[1].strip() if "version:" in first else first.strip()


def _engine(rec: RecordFacts, here: LocalFacts) -> Check:
    shown = f"record {rec.engine_name} " + (repr(rec.engine_version) if rec.engine_version else "(no version stated)")
    if here.engine_unknown:
        return Check("engine build", "unknown", f"{shown}; the local engine is not known: {here.engine_unknown}")
    shown += f" vs local {_version(here.engine_version)!r}"
    if rec.engine_sha256 and here.engine_sha256:
        same = rec.engine_sha256 == here.engine_sha256
        return Check("engine build", "same" if same else "differs",
                     f"{shown}; binary sha256 {rec.engine_sha256[:12]}… vs {here.engine_sha256[:12]}…")
    if rec.engine_commit and here.engine_commit:
        a, b = rec.engine_commit, here.engine_commit
        same = a.startswith(b) or b.startswith(a)
        return Check("engine build", "same" if same else "differs", f"{shown}; commit {a} vs {b}")
    rv, lv = _version(rec.engine_version), _version(here.engine_version)
    if rv and lv and rv == lv:
        return Check("engine build", "same", f"{shown}; same version string, no commit or binary hash to compare")
    if rv and lv:
        return Check("engine build", "differs", shown)
    return Check("engine build", "unknown", f"{shown}; the record states no version, commit or binary hash")


def _model(rec: RecordFacts, here: LocalFacts) -> Check:
    if rec.model_sha256 is None:
        return Check("model", "unknown", f"the record pins no model bytes (model instance {rec.model_instance_id}); "
                     "the same model cannot be confirmed")
    pin = f"record pins sha256 {rec.model_sha256[:12]}… ({rec.model_sha256_where})"
    if here.model_sha256 is None:
        pack = here.pack_model_sha256
        other = (f"; the pack pins other bytes ({pack[:12]}…): its model would be refused too"
                 if pack and pack != rec.model_sha256 else "")
        return Check("model", "unknown", f"{pin}; no local file: {here.model_unknown}{other}")
    same = here.model_sha256 == rec.model_sha256
    return Check("model", "same" if same else "differs",
                 f"{pin}; local {here.model_path} sha256 {here.model_sha256[:12]}…"
                 + ("" if same else ": not the record's weights, a run is refused"))


def comparability(rec: RecordFacts, here: LocalFacts, translation: Translation) -> list[Check]:
    """Hardware, engine build, model bytes, then every launch rewrite that changes what is measured."""
    checks = [_hardware(rec, here), _engine(rec, here), _model(rec, here)]
    checks += [Check("launch", "differs", b) for b in translation.blockers]
    return checks


def not_comparable(checks: list[Check]) -> list[str]:
    """The reasons a reproduction cannot be claimed: every fact that differs or is unknown (stated in full first)."""
    return [f"{c.what} {c.state}" + (f": {c.detail}" if c.what == "launch" else "")
            for c in checks if c.state != "same"]


@dataclass(frozen=True)
class MetricVerdict:
    cell: str
    metric: str
    verdict: Verdict
    reason: str
    record: RecordFigure | None
    run: Stat | None
    band: tuple[float, float] | None

    def as_dict(self) -> dict[str, Any]:
        r, s = self.record, self.run
        return {
            "cell": self.cell, "metric": self.metric, "verdict": self.verdict, "reason": self.reason,
            "record_median": r.median if r else None, "record_samples": list(r.samples) if r else [],
            "record_source": r.source if r else None,
            "run_median": s.median if s else None, "run_n": s.n if s else 0,
            "run_ci95": [s.ci95_low, s.ci95_high] if s and s.ci95_low is not None and s.ci95_high is not None
            else None,
            "band": list(self.band) if self.band else None,
        }


def band(record: RecordFigure, tolerance_pct: float) -> tuple[float, float]:
    """The record's spread joined with ±tolerance around its median."""
    lo, hi = record.median * (1 - tolerance_pct / 100), record.median * (1 + tolerance_pct / 100)
    if record.samples:
        lo, hi = min(lo, *record.samples), max(hi, *record.samples)
    return lo, hi


def _relation(metric: str, above: bool) -> Verdict:
    return ("SLOWER" if above else "FASTER") if metric in LOWER_IS_FASTER else ("FASTER" if above else "SLOWER")


def judge(cell: str, metric: str, record: RecordFigure | None, run: Stat | None, *, reasons: list[str],
          tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> MetricVerdict:
    """One metric of one cell: the verdict and its reason, in figures."""
    def out(verdict: Verdict, why: str, b: tuple[float, float] | None = None) -> MetricVerdict:
        return MetricVerdict(cell, metric, verdict, why, record, run, b)

    if record is None:
        return out("NOT_COMPARABLE", f"the record states no {metric} figure for {cell}")
    if run is None or run.n == 0 or run.median is None:
        return out("NOT_COMPARABLE", f"no {metric} samples were measured in {cell}")
    b = band(record, tolerance_pct)
    figures = (f"run median {run.median:,.2f} (n={run.n}, {run.interval_text()}) vs record {record.median:,.2f} "
               f"(band {b[0]:,.2f}–{b[1]:,.2f}: its spread and ±{tolerance_pct:g}%)")
    if reasons:
        return out("NOT_COMPARABLE", f"{'; '.join(reasons)}: a reproduction cannot be claimed; {figures}", b)
    if run.n < MIN_INTERVAL_N or run.ci95_low is None or run.ci95_high is None:
        return out("NOT_COMPARABLE", f"too few samples for a 95% interval (n={run.n} < {MIN_INTERVAL_N}); run "
                   f"with --samples {MIN_INTERVAL_N} or more; {figures}", b)
    lo, hi = run.ci95_low, run.ci95_high
    if b[0] <= lo and hi <= b[1]:
        return out("REPRODUCED", f"the run's 95% interval lies inside the band; {figures}", b)
    if lo > b[1]:
        return out(_relation(metric, True), f"the run's whole 95% interval lies above the band; {figures}", b)
    if hi < b[0]:
        return out(_relation(metric, False), f"the run's whole 95% interval lies below the band; {figures}", b)
    return out("NOT_COMPARABLE", f"inconclusive: the run's 95% interval straddles the band's edge; take more "
               f"samples or state a --tolerance; {figures}", b)
