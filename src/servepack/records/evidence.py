"""The evidence view model: what a pack's results history shows, computed once for every view.

Which runs bind (the tip of each kind) and which are historical, the headline, the noise floor, the smoke
tips and the candidates' decisions. MEASURED.md renders it; the HTML report renders the same object.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from servepack.bench.summary import Cell
from servepack.errors import ServepackError
from servepack.packs.schema import Candidate, Pack
from servepack.records.claims import HeadlineChoice, RunView, history, is_noise_floor, select_headline
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

    @property
    def tip(self) -> RunView:
        return self.runs[-1]

    @property
    def current_settings(self) -> list[SettingRow]:
        return [r for r in self.settings if r.binds]

    @property
    def historical_settings(self) -> list[SettingRow]:
        return [r for r in self.settings if not r.binds]


def _setting_rows(runs: list[RunView], pack: Pack) -> list[SettingRow]:
    groups: list[tuple[SettingKey, RunView, list[Cell]]] = []
    for run in runs:
        by_conc: dict[int, list[Cell]] = {}
        for c in (run.bench.cells if run.bench else []):
            by_conc.setdefault(c.concurrency, []).append(c)
        for conc, cells in sorted(by_conc.items()):
            groups.append(((run.preset, cells[0].gen_tokens, conc), run, sorted(cells, key=lambda c: c.context_tokens)))
    tip: dict[SettingKey, RunView] = {}
    for key, run, _ in groups:
        tip[key] = run  # runs are oldest first, so the last one per key is the tip
    return [SettingRow(key=key, run=run, cells=cells, binds=tip[key] is run,
                       superseded_by=None if tip[key] is run else tip[key],
                       noise_floor=any(is_noise_floor(c, pack.claims) for c in cells))
            for key, run, cells in reversed(groups)]


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
        done = [r for r in runs if r.preset == preset and r.bench is not None and r.receipt.status == "complete"]
        return done[-1] if done else None

    base, new = newest(cand.baseline_preset), newest(cand.preset)
    declared = f"declared by the pack: {cand.reason or 'no reason given'}"
    if base is None or new is None:
        return cand.decision, f"{declared} (no measured pair in this history)", None
    try:
        cmp = compare_views(base, new, pack)
    except ServepackError as exc:
        return cand.decision, f"{declared} (measured pair not comparable: {exc})", None
    return cmp.decision, (f"measured `{new.path.name}` vs `{base.path.name}`: " + "; ".join(cmp.reasons[:2])
                          + (f" · pack declared {cand.decision}" if cand.decision != cmp.decision else "")), cmp


def build_evidence(runs: list[RunView], pack: Pack) -> Evidence:
    """Everything the views show, from `runs` (oldest first; the newest of each kind binds)."""
    if not runs:
        raise ServepackError("no receipts to render from")
    settings = _setting_rows(runs, pack)
    smoke = _smoke_rows(runs)
    binding = frozenset({r.run.path for r in settings if r.binds} | {r.run.path for r in smoke})
    candidates = [CandidateRow(c, *measured_decision(runs, pack, c)) for c in pack.candidates]
    return Evidence(pack=pack, runs=runs, headline=select_headline(runs, pack.claims), settings=settings,
                    smoke=smoke, candidates=candidates, binding=binding)


def pack_history(run_dir: Path, pack: Pack) -> list[RunView]:
    """This run and its siblings of the same pack, oldest first."""
    return [r for r in history(run_dir) if r.receipt.pack.id == pack.id or r.path == run_dir.resolve()]


def evidence_for(run_dir: Path, pack: Pack) -> Evidence:
    return build_evidence(pack_history(run_dir, pack), pack)
