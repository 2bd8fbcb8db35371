"""`servepack run`: launch → bench → smoke → receipt → MEASURED.md, in one session."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servepack.bench.summary import BenchSummary
from servepack.errors import ClaimRefused
from servepack.pipeline.bench import CONTENTION_NAME, bench_in_session, watch_for
from servepack.pipeline.evidence import write_evidence
from servepack.progress import quiet
from servepack.records.receipt import RECEIPT_NAME, Receipt
from servepack.session import open_session
from servepack.smoke.result import SuiteResult
from servepack.smoke.runner import run_suite

Progress = Callable[[str], None]


@dataclass
class RunOutcome:
    """What one `servepack run` produced."""

    results_dir: Path
    bench: BenchSummary | None = None
    smoke: list[SuiteResult] = field(default_factory=list)
    receipt: Receipt | None = None
    measured: Path | None = None


def run_pack(
    pack_ref: str | None,
    preset: str | None = None,
    *,
    out: Path | None = None,
    server_bin: Path | None = None,
    model_path: Path | None = None,
    claim: bool = False,
    suites: list[str] | None = None,
    case_ids: list[str] | None = None,
    bench_overrides: dict[str, Any] | None = None,
    progress: Progress | None = None,
    wait_quiet_s: float = 0.0,
) -> RunOutcome:
    """The main job on one pack; a claim run that turns out ineligible raises ClaimRefused after recording.

    The host is watched through every measured phase (bench and each smoke suite); a smoke suite that ran on a
    contended host gets a note, since its duration is not a quiet figure.
    """
    outcome: RunOutcome | None = None
    with open_session(pack_ref, preset, out=out, kind="run", server_bin=server_bin, model_path=model_path,
                      claim=claim, progress=progress) as s:
        pack = s.pack
        outcome = RunOutcome(results_dir=s.results.path)
        s.record(temperature=pack.claims.temperature)
        if s.preset_name != pack.bench.preset:
            s.record(notes=[f"preset {s.preset_name} used instead of the bench plan's {pack.bench.preset}"])
        with watch_for(s) as watch:
            outcome.bench = bench_in_session(s, progress or quiet, watch=watch, wait_quiet_s=wait_quiet_s,
                                             **(bench_overrides or {}))
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
    assert outcome is not None
    outcome.receipt = Receipt.model_validate_json(outcome.results_dir.joinpath(RECEIPT_NAME).read_text())
    outcome.measured, _ = write_evidence(outcome.results_dir, pack)  # MEASURED.md and report.html: derived
    if claim and not outcome.receipt.claim.eligible:
        raise ClaimRefused(f"claim refused: {'; '.join(outcome.receipt.claim.reasons)} "
                           f"(recorded in {outcome.results_dir})")
    return outcome
