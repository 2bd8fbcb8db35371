"""Smoke jobs the CLI calls: suites against a pack's launched endpoint, or against an attached server."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servepack.engine.attach import attach
from servepack.errors import UsageError
from servepack.packs import load_pack
from servepack.pipeline.run import check_suites
from servepack.plan import RunOptions, plan_run
from servepack.progress import Progress
from servepack.session import open_session
from servepack.settings import Settings
from servepack.smoke.result import SuiteResult
from servepack.smoke.runner import run_suite
from servepack.smoke.runners import MODES
from servepack.store import ResultsDir, check_new_out


@dataclass(frozen=True)
class SmokeRun:
    """What a `servepack smoke` invocation produced: one SuiteResult per suite and where they were written."""

    results: list[SuiteResult]
    results_dir: Path
    base_url: str
    model: str


def smoke_attached(
    base_url: str, model: str, suites: Sequence[str], *, out: Path | None, label: str, temperature: float = 0.0,
    max_tokens: int = 512, repeat: int = 1, modes: tuple[str, ...] = MODES, progress: Progress | None = None,
    case_ids: Sequence[str] | None = None,
) -> SmokeRun:
    """Run suites against a server someone else started (on loopback); results under results/<label>/."""
    if not suites:
        raise UsageError("no suite to run; pass --suite agent_smoke (or hermes_agent_smoke, layer_b)")
    if case_ids and len(suites) != 1:
        raise UsageError("--case needs exactly one --suite")
    check_suites(list(suites), case_ids)  # every suite and case, before the server is asked anything
    if out is not None:
        check_new_out(out)  # before the server is asked anything
    endpoint = attach(base_url, model)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.") or "attached"
    results = ResultsDir.create(out) if out else ResultsDir.new(Settings.load().results_dir, safe, "smoke")
    done = [
        run_suite(endpoint, s, results, temperature=temperature, max_tokens=max_tokens, repeat=repeat,
                  modes=modes, progress=progress, case_ids=case_ids)
        for s in suites
    ]
    return SmokeRun(done, results.path, endpoint.base_url, model)


def smoke_pack(
    pack_ref: str | None, suites: Sequence[str], *, preset: str | None, out: Path | None,
    temperature: float | None = None, max_tokens: int | None = None, repeat: int = 1, modes: tuple[str, ...] = MODES,
    progress: Progress | None = None, case_ids: Sequence[str] | None = None, server_bin: Path | None = None,
    model_path: Path | None = None,
) -> SmokeRun:
    """Launch the pack's endpoint (its smoke preset unless told otherwise), run the suites, write the receipt."""
    pack = load_pack(pack_ref).pack
    names = list(suites) or list(pack.smoke.suites)
    if not names:
        raise UsageError(f"pack {pack.id} lists no smoke.suites; pass --suite")
    if case_ids and len(names) != 1:
        raise UsageError("--case needs exactly one --suite")
    check_suites(names, case_ids)  # every suite and case, before any server starts
    temp = pack.claims.temperature if temperature is None else temperature
    tokens = max_tokens or pack.smoke.max_tokens
    with open_session(plan_run(pack_ref, preset or pack.smoke.preset, RunOptions(
            out=out, kind="smoke", server_bin=server_bin, model_path=model_path, progress=progress))) as s:
        if s.random_weights:
            raise UsageError("random-weight twin: speed only, never smoke")
        s.record(temperature=temp)
        done = []
        for name in names:
            done.append(run_suite(s.endpoint, name, s.results, temperature=temp, max_tokens=tokens, repeat=repeat,
                                  modes=modes, progress=progress, case_ids=case_ids))
            s.endpoint.check_alive()
        return SmokeRun(done, s.results.path, s.endpoint.base_url, s.endpoint.model)
