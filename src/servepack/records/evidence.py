"""The evidence view model: what a pack's results history shows, computed once for every view.

Which runs bind (the tip of each kind) and which are historical, the headline, the noise floor, the smoke
tips and the candidates' decisions. MEASURED.md renders it; the HTML report renders the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from servepack.bench.summary import Cell
from servepack.errors import ServepackError
from servepack.packs.schema import Candidate, Pack
from servepack.records.claims import HeadlineChoice, RunView, history, is_noise_floor, select_headline
from servepack.records.policy import cell_quality, judged_metric
from servepack.records.receipt import Receipt
from servepack.smoke.result import SuiteResult

if TYPE_CHECKING:
    from servepack.records.compare import Comparison

SettingKey = tuple[str | None, int, int]  # (preset, gen_tokens, concurrency)


@dataclass(frozen=True)
class SettingRow:
    """One bench setting of one run: its cells (by context mark), whether it binds, and what superseded it."""

    key: SettingKey
    run: RunView
    cells: list[Cell]
    binds: bool
    superseded_by: RunView | None
    noise_floor: bool
    noisy: str | None = None  # why these figures are not claim-grade: shown labelled, never binding


@dataclass(frozen=True)
class Drift:
    """A new run of a setting that differs from the previous tip (same pins, same host) beyond its interval."""

    key: SettingKey
    context_tokens: int
    metric: str
    new: RunView
    previous: RunView
    new_median: float
    previous_median: float
    interval: tuple[float, float]  # the 95% interval the move is judged against
    interval_of: str  # "new" or "previous": whose interval (the new run's when it has one)
    causes: list[str]

    @property
    def change_pct(self) -> float:
        return (self.new_median - self.previous_median) / self.previous_median * 100


@dataclass(frozen=True)
class SmokeRow:
    """The tip run of one suite, and the older runs of it (historical only)."""

    suite: str
    run: RunView
    file: str
    result: SuiteResult
    older: list[tuple[RunView, SuiteResult]]


@dataclass(frozen=True)
class CandidateRow:
    candidate: Candidate
    decision: str
    reason: str
    comparison: Comparison | None = None  # the measured pair behind the decision, when there is one


@dataclass(frozen=True)
class Evidence:
    pack: Pack
    runs: list[RunView]  # oldest first
    headline: HeadlineChoice
    settings: list[SettingRow]  # newest first
    smoke: list[SmokeRow]  # by suite name
    candidates: list[CandidateRow]
    binding: frozenset[Path]
    drift: list[Drift] = field(default_factory=list)

    @property
    def tip(self) -> RunView:
        return self.runs[-1]

    @property
    def current_settings(self) -> list[SettingRow]:
        return [r for r in self.settings if r.binds]

    @property
    def historical_settings(self) -> list[SettingRow]:
        return [r for r in self.settings if not r.binds and r.noisy is None]

    @property
    def noisy_settings(self) -> list[SettingRow]:
        return [r for r in self.settings if r.noisy is not None]

    @property
    def capacity_runs(self) -> list[RunView]:
        """Runs with a capacity sweep, oldest first: the newest is the tip, the others historical."""
        return [r for r in self.runs if r.capacity is not None]


def _noisy(cells: list[Cell], pack: Pack) -> str | None:
    parts = []
    for c in cells:
        problems = cell_quality(c, pack.claims)
        if problems:
            parts.append(f"ctx {c.context_tokens:,}: {'; '.join(problems)}")
    return "noisy: " + " · ".join(parts) if parts else None


def _setting_rows(runs: list[RunView], pack: Pack) -> list[SettingRow]:
    groups: list[tuple[SettingKey, RunView, list[Cell], str | None]] = []
    for run in runs:
        by_conc: dict[int, list[Cell]] = {}
        for c in (run.bench.cells if run.bench else []):
            by_conc.setdefault(c.concurrency, []).append(c)
        for conc, cells in sorted(by_conc.items()):
            ordered = sorted(cells, key=lambda c: c.context_tokens)
            groups.append(((run.preset, cells[0].gen_tokens, conc), run, ordered, _noisy(ordered, pack)))
    tip: dict[SettingKey, RunView] = {}
    for key, run, _, noisy in groups:
        if noisy is None:
            tip[key] = run  # runs are oldest first, so the last claim-grade one per key is the tip
    return [SettingRow(key=key, run=run, cells=cells, binds=tip.get(key) is run,
                       superseded_by=None if tip.get(key) is run else tip.get(key),
                       noise_floor=any(is_noise_floor(c, pack.claims) for c in cells), noisy=noisy)
            for key, run, cells, noisy in reversed(groups)]


def _pin(r: Receipt) -> tuple[str | None, str | None] | None:
    return (r.engine.package_version, r.engine.commit) if r.engine else None


def _same_pins_and_host(a: RunView, b: RunView) -> bool:
    ra, rb = a.receipt, b.receipt
    return (_pin(ra) == _pin(rb) and (ra.model.sha256 if ra.model else None) == (rb.model.sha256 if rb.model else None)
            and (ra.preset.flags if ra.preset else None) == (rb.preset.flags if rb.preset else None)
            and (ra.host.hostname, ra.host.cpu_model) == (rb.host.hostname, rb.host.cpu_model))


def likely_causes(new: RunView, old: RunView, new_cell: Cell, old_cell: Cell) -> list[str]:
    """What the recorded facts say changed between two runs: contention, frequency/thermal, steal, engine."""
    causes = []
    for label, cell in (("new", new_cell), ("previous", old_cell)):
        if cell.contended:
            why = f": {cell.contention[0]}" if cell.contention else ""
            causes.append(f"contention in the {label} run ({cell.contended}/{cell.n} samples{why})")
    hn = new.bench.host if new.bench else None
    ho = old.bench.host if old.bench else None
    if hn and ho:
        if hn.cpu_mhz_min and ho.cpu_mhz_min and abs(hn.cpu_mhz_min - ho.cpu_mhz_min) / ho.cpu_mhz_min > 0.05:
            causes.append(f"CPU frequency {ho.cpu_mhz_min:,.0f} → {hn.cpu_mhz_min:,.0f} MHz (thermal or power)")
        if hn.throttle_events:
            causes.append(f"thermal: {hn.throttle_events} throttle events in the new run")
        if (hn.steal_pct_max or 0) >= 5 and (hn.steal_pct_max or 0) > 2 * (ho.steal_pct_max or 0):
            causes.append(f"hypervisor steal up to {hn.steal_pct_max:.0f}% in the new run")
        if not causes and (hn.others_cores_median or 0) > 2 * (ho.others_cores_median or 0) + 0.05:
            causes.append(f"other processes used {hn.others_cores_median:.2f} cores (median) vs "
                          f"{ho.others_cores_median or 0:.2f} before")
    en, eo = new.receipt.engine, old.receipt.engine
    if en and eo and en.sha256 != eo.sha256:
        causes.append(f"engine binary changed (sha256 {eo.sha256[:8]}… → {en.sha256[:8]}…)")
    if new.receipt.server and old.receipt.server:
        changed = _changed_flags(old.receipt.server.argv[1:], new.receipt.server.argv[1:])
        if changed:
            causes.append(f"server command line changed ({'; '.join(changed)})")
    if new.receipt.servepack_version != old.receipt.servepack_version:
        causes.append(f"servepack {old.receipt.servepack_version} → {new.receipt.servepack_version}")
    return causes or ["no recorded fact explains it"]


# Chosen afresh for every launch (a free loopback port): never a difference between two runs' settings.
_PER_LAUNCH_FLAGS = frozenset({"--port"})


def _flag_values(argv: list[str]) -> dict[str, str]:
    """`--flag value` pairs (a bare flag maps to ""), the per-launch ones left out."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        value = nxt if nxt is not None and (not nxt.startswith("-") or _is_number(nxt)) else None
        if arg not in _PER_LAUNCH_FLAGS:
            out[arg] = value or ""
        i += 2 if value is not None else 1
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _changed_flags(old: list[str], new: list[str]) -> list[str]:
    a, b = _flag_values(old), _flag_values(new)
    return [f"{k} {a.get(k, '(absent)') or '(set)'} → {b.get(k, '(absent)') or '(set)'}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _drift(rows: list[SettingRow], pack: Pack) -> list[Drift]:
    """For each setting: the newest run against the previous claim-grade tip, same pins and host, per cell."""
    metric = judged_metric(pack.claims)
    out = []
    by_key: dict[SettingKey, list[SettingRow]] = {}
    for row in rows:  # newest first
        by_key.setdefault(row.key, []).append(row)
    for key, group in by_key.items():
        newest = group[0]
        previous = next((r for r in group[1:] if r.noisy is None and _same_pins_and_host(newest.run, r.run)), None)
        if previous is None:
            continue
        old_cells = {c.context_tokens: c for c in previous.cells}
        for cell in newest.cells:
            old = old_cells.get(cell.context_tokens)
            if old is None:
                continue
            new_stat, old_stat = getattr(cell, metric), getattr(old, metric)
            if new_stat.median is None or not old_stat.median:
                continue
            # The previous median outside the new run's interval; with no new interval, the reverse.
            if new_stat.ci95_low is not None and new_stat.ci95_high is not None:
                lo, hi, whose, probe = new_stat.ci95_low, new_stat.ci95_high, "new", old_stat.median
            elif old_stat.ci95_low is not None and old_stat.ci95_high is not None:
                lo, hi, whose, probe = old_stat.ci95_low, old_stat.ci95_high, "previous", new_stat.median
            else:
                continue
            if not lo <= probe <= hi:
                out.append(Drift(key=key, context_tokens=cell.context_tokens, metric=metric, new=newest.run,
                                 previous=previous.run, new_median=new_stat.median, previous_median=old_stat.median,
                                 interval=(lo, hi), interval_of=whose,
                                 causes=likely_causes(newest.run, previous.run, cell, old)))
    return out


def _smoke_rows(runs: list[RunView]) -> list[SmokeRow]:
    by_suite: dict[str, list[tuple[RunView, str, SuiteResult]]] = {}
    for run in runs:
        for name, suite in run.smoke:
            by_suite.setdefault(suite.suite, []).append((run, name, suite))
    rows = []
    for suite_name, entries in sorted(by_suite.items()):
        run, fname, result = entries[-1]
        rows.append(SmokeRow(suite=suite_name, run=run, file=fname, result=result,
                             older=[(r, s) for r, _, s in entries[:-1]]))
    return rows


def measured_decision(runs: list[RunView], pack: Pack, cand: Candidate) -> tuple[str, str, Comparison | None]:
    """The compare decision of the newest candidate run against the newest baseline run, else the pack's."""
    from servepack.records.compare import compare_views

    def newest(preset: str) -> RunView | None:
        """The newest claim-grade complete run of a preset; the newest noisy one only when there is none."""
        done = [r for r in runs if r.preset == preset and r.bench is not None and r.receipt.status == "complete"]
        quiet = [r for r in done if r.bench is not None and _noisy(r.bench.cells, pack) is None]
        return (quiet or done)[-1] if done else None

    base, new = newest(cand.baseline_preset), newest(cand.preset)
    declared = f"declared by the pack: {cand.reason or 'no reason given'}"
    if base is None or new is None:
        return cand.decision, f"{declared} (no measured pair in this history)", None
    noisy = [r.path.name for r in (base, new) if r.bench is not None and _noisy(r.bench.cells, pack) is not None]
    try:
        cmp = compare_views(base, new, pack)
    except ServepackError as exc:
        return cand.decision, f"{declared} (measured pair not comparable: {exc})", None
    return cmp.decision, (f"measured `{new.path.name}` vs `{base.path.name}`: " + "; ".join(cmp.reasons[:2])
                          + (f" · pack declared {cand.decision}" if cand.decision != cmp.decision else "")
                          + (f" · **measured on noisy runs ({', '.join(noisy)}): not a claim**" if noisy else "")), cmp


def build_evidence(runs: list[RunView], pack: Pack) -> Evidence:
    """Everything the views show, from `runs` (oldest first; the newest of each kind binds)."""
    if not runs:
        raise ServepackError("no receipts to render from")
    settings = _setting_rows(runs, pack)
    smoke = _smoke_rows(runs)
    binding = frozenset({r.run.path for r in settings if r.binds} | {r.run.path for r in smoke})
    candidates = [CandidateRow(c, *measured_decision(runs, pack, c)) for c in pack.candidates]
    return Evidence(pack=pack, runs=runs, headline=select_headline(runs, pack.claims), settings=settings,
                    smoke=smoke, candidates=candidates, binding=binding, drift=_drift(settings, pack))


def pack_history(run_dir: Path, pack: Pack) -> list[RunView]:
    """This run and its siblings of the same pack, oldest first."""
    return [r for r in history(run_dir) if r.receipt.pack.id == pack.id or r.path == run_dir.resolve()]


def evidence_for(run_dir: Path, pack: Pack) -> Evidence:
    return build_evidence(pack_history(run_dir, pack), pack)
