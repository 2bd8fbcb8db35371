"""`servepack run`: launch → bench → smoke → receipt → MEASURED.md, in one session."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servepack.bench.summary import BenchSummary
from servepack.errors import ClaimRefused, UsageError
from servepack.packs import load_pack
from servepack.pipeline.bench import CONTENTION_NAME, bench_in_session, bench_settings, check_client_limits, watch_for
from servepack.pipeline.evidence import evidence_after, write_evidence
from servepack.plan import RunOptions, plan_run
from servepack.progress import Progress, quiet
from servepack.records.receipt import RECEIPT_NAME, Receipt
from servepack.session import Session, open_session
from servepack.smoke.result import SuiteResult
from servepack.smoke.runner import run_suite, runner_for


@dataclass
class RunOutcome:
    """What one `servepack run` produced."""

    results_dir: Path
    bench: BenchSummary | None = None
    smoke: list[SuiteResult] = field(default_factory=list)
    receipt: Receipt | None = None
    measured: Path | None = None


def check_suites(names: list[str], case_ids: Sequence[str] | None) -> None:
    """Every suite named and every `--case` found in it, before any server starts (UsageError, exit 2): the
    shipped suites and their cases, Layer B with its sandbox, a BFCL suite's categories and entries."""
    if case_ids and len(names) != 1:
        raise UsageError(f"--case needs exactly one suite; {len(names)} would run ({', '.join(names) or 'none'})")
    for name in names:
        runner_for(name).check(name, case_ids)


def run_pack(
    pack_ref: str | None,
    preset: str | None = None,
    options: RunOptions | None = None,
    *,
    suites: list[str] | None = None,
    case_ids: list[str] | None = None,
    bench_overrides: dict[str, Any] | None = None,
    wait_quiet_s: float = 0.0,
) -> RunOutcome:
    """The main job on one pack; a claim run that turns out ineligible raises ClaimRefused after recording.

    `options` are the session's (`--out`, `--server-bin`, `--model`, `--claim`, progress); its kind is "run". The
    host is watched through every measured phase (bench and each smoke suite); a smoke suite that ran on a
    contended host gets a note, since its duration is not a quiet figure.
    """
    options = replace(options or RunOptions(), kind="run")
    claim = options.claim
    pack = load_pack(pack_ref).pack
    # What the command names, checked before anything starts: the bench settings, this client's limits, the suites.
    check_client_limits(bench_settings(pack.bench, pack.claims, **(bench_overrides or {})).concurrency)
    check_suites(list(pack.smoke.suites if suites is None else suites), case_ids or None)
    say = options.progress or quiet
    outcome: RunOutcome | None = None
    try:
        with open_session(plan_run(pack_ref, preset, options)) as s:
            outcome = RunOutcome(results_dir=s.results.path)
            _measure(s, outcome, suites, case_ids, bench_overrides or {}, say, wait_quiet_s)
    except BaseException:
        if outcome is not None:  # the receipt is sealed (partial); MEASURED.md and report.html show what was measured
            evidence_after(outcome.results_dir, pack, say)
        raise
    assert outcome is not None
    outcome.receipt = Receipt.model_validate_json(outcome.results_dir.joinpath(RECEIPT_NAME).read_text())
    outcome.measured, _ = write_evidence(outcome.results_dir, pack)  # MEASURED.md and report.html: derived
    if claim and not outcome.receipt.claim.eligible:
        raise ClaimRefused(f"claim refused: {'; '.join(outcome.receipt.claim.reasons)} "
                           f"(recorded in {outcome.results_dir})")
    return outcome


def _measure(s: Session, outcome: RunOutcome, suites: list[str] | None, case_ids: list[str] | None,
             bench_overrides: dict[str, Any], progress: Progress, wait_quiet_s: float) -> None:
    """The bench, then each smoke suite, in the open session; what each returns goes into `outcome` at once."""
    pack = s.pack
    s.record(temperature=pack.claims.temperature)
    if s.preset_name != pack.bench.preset:
        s.record(notes=[f"preset {s.preset_name} used instead of the bench plan's {pack.bench.preset}"])
    with watch_for(s) as watch:
        outcome.bench = bench_in_session(s, progress, watch=watch, wait_quiet_s=wait_quiet_s, **bench_overrides)
        chosen = pack.smoke.suites if suites is None else suites
        if chosen and s.random_weights:
            s.record(notes=["smoke skipped: random-weight shape twin (speed only)"])
            chosen = []
        for suite in chosen:
            s.endpoint.check_alive()
            t0 = time.time()
            outcome.smoke.append(run_suite(
                s.endpoint, suite, s.results, temperature=pack.claims.temperature,
                max_tokens=pack.smoke.max_tokens, progress=progress, case_ids=case_ids or None,
            ))
            phase = watch.phase(f"smoke {suite}", t0)
            if phase.contended:
                s.record(notes=[f"smoke {suite}: host contended during the suite ({phase.reason}); its "
                                "duration is not a quiet figure"])
        s.results.write_json(CONTENTION_NAME, watch.summary())
