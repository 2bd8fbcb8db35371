"""`servepack tune`: trials through the engine seam, each a fresh server measured by the bench, then a compare.

Every trial opens its own session (a results directory with a receipt under `trials/NNN/`) with the trial's flags
on top of the base preset, benches the objective's cell with fresh samples, and is appended to `trials.jsonl` as
soon as it ends. A trial that fails to load, crashes, loses requests or trips the memory guard is rejected with
its reason and the server log's tail; the search goes on. The best configuration and the base preset are then
benched again side by side and compared by the pack's rule (PROMOTE / DO_NOT_PROMOTE / INCONCLUSIVE).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servepack.bench.stats import MIN_INTERVAL_N, describe
from servepack.engine.server import preset_args, tail
from servepack.errors import EngineError, ServepackError, UsageError
from servepack.host.fingerprint import fingerprint
from servepack.packs import LoadedPack, Preset, load_pack
from servepack.pipeline.bench import bench_in_session
from servepack.plan import RunOptions, RunPlan, plan_run
from servepack.progress import Progress, quiet
from servepack.records.claims import load_run, metric_samples
from servepack.records.compare import METRICS, Comparison, compare_views
from servepack.redact import holds_secret, redact_flags, secret_values
from servepack.session import open_session
from servepack.settings import Settings
from servepack.store import REDACTED, ResultsDir, check_new_out, register_secrets, rfc3339, utc_now
from servepack.tune.space import build_space, config_key, default_space, load_space, merged_flags
from servepack.tune.strategy import Arm, Proposal, arms_of, next_proposal, plan_budget, race_state, winner
from servepack.tune.trials import (
    PLAN_NAME,
    RESULT_NAME,
    Figure,
    Metric,
    Objective,
    TrialRecord,
    TrialStatus,
    TunePlan,
    append_trial,
    read_plan,
    read_trials,
    write_plan,
)
from servepack.tune.userpack import check_target, write_preset

LOG_TAIL_LINES = 20


@dataclass
class TuneRequest:
    """What the user asked for; everything optional falls back to the pack and the host."""

    pack_ref: str | None = None
    preset: str | None = None
    space_file: Path | None = None
    budget_trials: int | None = None
    budget_time_s: float | None = None
    metric: Metric | None = None
    max_ttft_ms: float | None = None
    samples: int = 3
    confirm_samples: int | None = None
    seed: int = 0
    server_bin: Path | None = None
    model_file: Path | None = None
    resume: Path | None = None
    out: Path | None = None
    write_pack: Path | None = None
    preset_name: str = "tuned"


@dataclass
class TuneOutcome:
    tune_dir: Path
    plan: TunePlan
    trials: list[TrialRecord]
    best: Arm | None
    comparison: Comparison | None = None
    decision: str = "INCONCLUSIVE"
    reasons: list[str] = field(default_factory=list)
    pack_file: Path | None = None
    preset_written: str | None = None
    pruned: list[str] = field(default_factory=list)


def _new_plan(req: TuneRequest, loaded: LoadedPack) -> TunePlan:
    pack = loaded.pack
    try:
        base_name, base = pack.preset(req.preset or pack.claims.headline.preset)
    except KeyError as exc:
        raise UsageError(f"--preset: {exc.args[0]}") from None
    if req.space_file is not None:
        space = load_space(req.space_file)
    elif pack.tune:
        space = build_space(pack.tune, f"{loaded.path} [tune]")
    else:
        host = fingerprint()
        space = default_space(host.cpu_cores_physical or host.cpu_cores_logical, len(host.gpus))
    grid = space.grid(base.flags)
    if not grid:
        raise UsageError(f"space ({space.source}): no configuration holds the constraints between flags "
                         "(ubatch ≤ batch; a quantised V cache needs flash-attn on)")
    h = pack.claims.headline
    objective = Objective(metric=req.metric or h.metric, source=h.source, context_tokens=h.context_tokens,
                          gen_tokens=h.gen_tokens, max_ttft_ms=req.max_ttft_ms)
    budget = plan_budget(len(grid), req.budget_trials)
    return TunePlan(
        # tune.json keeps the base flags with their secrets redacted; a trial takes them from the pack (`base_flags`)
        pack_ref=str(loaded.path), pack_id=pack.id, base_preset=base_name, base_flags=redact_flags(base.flags),
        space=space,
        objective=objective, samples=req.samples, confirm_samples=req.confirm_samples or pack.bench.samples,
        budget_trials=budget.budget_trials, budget_time_s=req.budget_time_s, screen_trials=budget.screen_trials,
        race_arms=budget.race_arms, race_max_trials=budget.race_max_trials,
        strategy="exhaustive" if budget.strategy == "exhaustive" else "optuna", seed=req.seed,
        server_bin=str(req.server_bin) if req.server_bin else None,
        model_file=str(req.model_file) if req.model_file else None, created_at=rfc3339(utc_now()),
    )


def _resumed_plan(req: TuneRequest, tune_dir: Path) -> TunePlan:
    fixed = {"--preset": req.preset, "--space": req.space_file, "--objective": req.metric,
             "--max-ttft-ms": req.max_ttft_ms, "--out": req.out}
    given = [name for name, value in fixed.items() if value is not None]
    if given:
        raise UsageError(f"--resume continues the plan in {tune_dir}/tune.json; drop {', '.join(given)}")
    plan = read_plan(tune_dir)
    update: dict[str, Any] = {}
    if req.budget_trials is not None:
        update["budget_trials"] = req.budget_trials
    if req.budget_time_s is not None:
        update["budget_time_s"] = req.budget_time_s
    if req.server_bin is not None:
        update["server_bin"] = str(req.server_bin)
    if req.model_file is not None:
        update["model_file"] = str(req.model_file)
    if req.confirm_samples is not None:
        update["confirm_samples"] = req.confirm_samples
    return plan.model_copy(update=update)


def base_flags(plan: TunePlan, loaded: LoadedPack) -> dict[str, Any]:
    """The base preset's flags a trial serves: tune.json's, each value it keeps redacted (a key) taken from the pack's
    preset again, so no file of the tune ever holds the key and `--resume` still serves it. A pack that no longer
    gives one is refused with one line."""
    flags = dict(plan.base_flags)
    preset = loaded.pack.presets.get(plan.base_preset)
    for name, value in plan.base_flags.items():
        if value != REDACTED:
            continue
        given = preset.flags.get(name) if preset is not None else None
        if given is None or not holds_secret(name, given) or given == REDACTED:
            raise UsageError(f"{loaded.path}: preset {plan.base_preset!r} no longer gives flag {name!r}, whose secret "
                             f"value tune.json does not keep (it is redacted there); put it back in that preset, or "
                             "start a new tune")
        flags[name] = given
    register_secrets(secret_values(["servepack", *preset_args(flags)]))  # no file of the tune keeps them
    return flags


def _preflight(plan: TunePlan, base: dict[str, Any]) -> RunPlan:
    """What every trial shares is resolved once, in one survey plan of the base preset: a missing binary or a bad
    --model-file stops the tune instead of rejecting each trial, and every trial serves the engine located and the
    model hashed here (a pack's model that cannot be resolved is left to each trial, which fails on it as before)."""
    pre = plan_run(plan.pack_ref, plan.base_preset, RunOptions(
        preset_override=_trial_preset(base, {}, "tune preflight"), kind="tune", survey=True,
        server_bin=Path(plan.server_bin) if plan.server_bin else None,
        model_path=Path(plan.model_file) if plan.model_file else None))
    pack = pre.pack
    if not pre.engine.launches:
        raise UsageError(f"pack {pack.id}: engine {pack.engine.name!r} attaches to a running server; tune needs "
                         "an engine servepack launches (each trial is a fresh server)")
    if pre.engine_error is not None:
        raise pre.engine_error
    if plan.model_file is not None and pre.model_error is not None:
        raise pre.model_error  # a FIFO, a device, a folder or no GGUF: refused before a trial
    return pre


def _trial_dir(tune_dir: Path, n: int) -> Path:
    """trials/NNN; a directory left by an interrupted trial of that number is moved aside, never reused."""
    path = tune_dir / "trials" / f"{n:03d}"
    if path.exists():
        k = 1
        while (aside := path.with_name(f"{path.name}.interrupted{'' if k == 1 else f'.{k}'}")).exists():
            k += 1
        path.rename(aside)
    return path


def _figure(values: list[float]) -> Figure:
    s = describe(values)
    return Figure(n=s.n, median=s.median, ci95_low=s.ci95_low, ci95_high=s.ci95_high)


def _trial_preset(base: dict[str, Any], config: dict[str, Any], label: str) -> Preset:
    return Preset(flags=merged_flags(base, config), role="experiment", description=label)


def _bench_overrides(plan: TunePlan, samples: int) -> dict[str, Any]:
    o = plan.objective
    return {"context_marks": (o.context_tokens,), "gen_tokens": o.gen_tokens, "samples": samples,
            "concurrency": (1,), "warmup": 0}


def _measure(plan: TunePlan, preset_name: str, preset: Preset | None, out: Path, samples: int,
             pre: RunPlan | None = None) -> None:
    """One fresh session benching the objective's cell; raises EngineError on load failure, crash, guard. The engine
    and the model, and their file facts (header, build record, twin mark), are the preflight's (`pre`), when it
    resolved them."""
    bin_ = Path(plan.server_bin) if plan.server_bin else None
    model = Path(plan.model_file) if plan.model_file else None
    with open_session(plan_run(plan.pack_ref, preset_name, RunOptions(
            preset_override=preset, out=out, kind="tune", server_bin=bin_, model_path=model,
            model=pre.model if pre else None, facts=pre.facts if pre else None, prior=pre))) as session:
        summary = bench_in_session(session, quiet, **_bench_overrides(plan, samples))
        failures = [f for c in summary.cells for f in c.failures]
        if failures:
            time.sleep(0.2)  # a server that crashed mid-stream may still be exiting
            session.endpoint.check_alive()
            raise EngineError(f"{len(failures)} request(s) failed: {failures[0]}")


def run_trial(plan: TunePlan, base: dict[str, Any], proposal: Proposal, n: int, tune_dir: Path, *,
              pre: RunPlan | None = None) -> TrialRecord:
    """Launch, measure and judge one trial; every failure of the server is a rejected trial, never an abort."""
    trial_dir = _trial_dir(tune_dir, n)
    started, t0 = rfc3339(utc_now()), time.monotonic()
    common: dict[str, Any] = {"trial": n, "phase": proposal.phase, "key": proposal.key,
                              "config": proposal.config, "results_dir": str(trial_dir.relative_to(tune_dir)),
                              "started_at": started}
    preset = _trial_preset(base, proposal.config, f"tune trial {n}: {proposal.key or 'base preset'}")
    try:
        _measure(plan, f"tune-{n:03d}", preset, trial_dir, plan.samples, pre)
        view = load_run(trial_dir)
    except EngineError as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return TrialRecord(**common, status="rejected", reason=why, wall_s=round(time.monotonic() - t0, 3),
                           log_tail=tail(trial_dir / "server.log", LOG_TAIL_LINES))
    o = plan.objective
    cell = (o.context_tokens, 1, o.gen_tokens)
    figures = {m: _figure(metric_samples(view, cell, m, o.source)) for m in METRICS}
    values = metric_samples(view, cell, o.metric, o.source)
    status: TrialStatus = "ok"
    reason: str | None = None
    ttft = figures["ttft_ms"].median
    if not values:
        status, reason = "rejected", f"no {o.metric} samples in the trial's bench"
    elif o.max_ttft_ms is not None and ttft is not None and ttft > o.max_ttft_ms:
        status, reason = "infeasible", f"median TTFT {ttft:.0f} ms > --max-ttft-ms {o.max_ttft_ms:g}"
    return TrialRecord(**common, status=status, reason=reason, samples=values, figures=figures,
                       wall_s=round(time.monotonic() - t0, 3))


def _say_trial(say: Progress, plan: TunePlan, t: TrialRecord, history: list[TrialRecord]) -> None:
    unit = plan.objective.metric
    head = f"trial {t.trial}/{plan.budget_trials} ({t.phase}) {t.key or '(base preset)'}: "
    f = t.figures.get(plan.objective.metric)
    if t.status == "ok" and f and f.median is not None:
        head += f"{f.median:.2f} {unit} " + (f"[95% CI {f.ci95_low:.2f}–{f.ci95_high:.2f}]"
                                             if f.ci95_low is not None and f.ci95_high is not None
                                             else f"[too few for an interval (n={f.n} < {MIN_INTERVAL_N})]")
    else:
        head += f"{t.status.upper()} ({t.reason})"
    best = winner(plan, history)
    if best is not None:
        head += f" · best {best.key or '(base preset)'} {best.median:.2f}"
    say(head)


def search(plan: TunePlan, base: dict[str, Any], tune_dir: Path, say: Progress, *,
           pre: RunPlan | None = None) -> list[TrialRecord]:
    """Run trials until the strategy is done, the trial budget or the time budget is spent; `pre`: the preflight's
    plan, whose engine and model every trial serves."""
    history = read_trials(tune_dir)
    spent = sum(t.wall_s for t in history)
    t0 = time.monotonic()
    pruned_seen: set[str] = {a.key for a in race_state(plan, history)[1]} if history else set()
    while (proposal := next_proposal(plan, history)) is not None:
        if plan.budget_time_s is not None and spent + (time.monotonic() - t0) >= plan.budget_time_s:
            say(f"time budget {plan.budget_time_s:g} s spent after {len(history)} trials")
            break
        n = max((t.trial for t in history), default=0) + 1
        try:
            record = run_trial(plan, base, proposal, n, tune_dir, pre=pre)
        except (KeyboardInterrupt, SystemExit):
            say(f"interrupted in trial {n}; continue with: servepack tune --resume {tune_dir}")
            raise
        append_trial(tune_dir, record)
        history.append(record)
        _say_trial(say, plan, record, history)
        for arm in race_state(plan, history)[1]:
            if arm.key not in pruned_seen:
                pruned_seen.add(arm.key)
                say(f"pruned {arm.key or '(base preset)'}: " + (f"rejected ({arm.rejected})" if arm.rejected else
                                             "its 95% interval lies below the best arm's"))
    return history


def _confirm(plan: TunePlan, loaded: LoadedPack, base: dict[str, Any], best: Arm, tune_dir: Path,
             say: Progress, pre: RunPlan | None = None) -> Comparison | None:
    """Bench the base preset and the best configuration afresh, one after the other, and compare them."""
    root = tune_dir / "compare"
    k = 1
    while (root / f"{k}").exists():
        k += 1
    base_dir, best_dir = root / f"{k}" / "baseline", root / f"{k}" / "best"
    say(f"compare: base preset {plan.base_preset} vs best {best.key}, {plan.confirm_samples} samples each")
    try:
        _measure(plan, plan.base_preset, None, base_dir, plan.confirm_samples, pre)
        _measure(plan, "tuned", _trial_preset(base, best.config, "tuned"), best_dir, plan.confirm_samples, pre)
        return compare_views(load_run(base_dir), load_run(best_dir), loaded.pack)
    except ServepackError as exc:
        say(f"compare failed: {str(exc).splitlines()[0]}")
        return None


def tune(req: TuneRequest, progress: Progress | None = None) -> TuneOutcome:
    """Plan (or resume), search, compare best vs base, write the user pack and tune_result.json."""
    say = progress or quiet
    if req.resume is None:
        _check_new_out(req.out)
    plan = _resumed_plan(req, req.resume) if req.resume is not None else _new_plan(req, load_pack(req.pack_ref))
    loaded = load_pack(plan.pack_ref)
    base = base_flags(plan, loaded)
    if req.resume is not None:
        say(f"resuming {req.resume}: {len(read_trials(req.resume))} trials in the log")
    if req.write_pack is not None:
        check_target(req.write_pack, loaded, base)
    pre = _preflight(plan, base)
    tune_dir = req.resume if req.resume is not None else _new_dir(req, plan)
    grid = plan.space.grid(plan.base_flags)
    say(f"tune {plan.pack_id} · base preset {plan.base_preset} · {plan.objective.label()}"
        + (f", TTFT ≤ {plan.objective.max_ttft_ms:g} ms" if plan.objective.max_ttft_ms else ""))
    say(f"space {plan.space.source}: {len(grid)} configurations hold the constraints; strategy {plan.strategy}, "
        f"budget {plan.budget_trials} trials ({plan.screen_trials} screen) · results → {tune_dir}")
    history = search(plan, base, tune_dir, say, pre=pre)
    best = winner(plan, history)
    outcome = TuneOutcome(tune_dir=tune_dir, plan=plan, trials=history, best=best,
                          pruned=[a.key for a in race_state(plan, history)[1]])
    if best is None:
        outcome.reasons = ["no trial was accepted; see the reasons in trials.jsonl"]
    elif best.key == config_key(_baseline_of(plan, history)):
        outcome.decision = "DO_NOT_PROMOTE"
        outcome.reasons = ["the best configuration found is the base preset's own"]
    else:
        outcome.comparison = _confirm(plan, loaded, base, best, tune_dir, say, pre)
        if outcome.comparison is not None:
            outcome.decision = outcome.comparison.decision
            outcome.reasons = list(outcome.comparison.reasons)
        else:
            outcome.reasons = ["the compare runs did not complete"]
    if best is not None and req.write_pack is not None:
        desc = f"servepack tune {rfc3339(utc_now())}: {best.key}; compare vs {plan.base_preset}: {outcome.decision}"
        try:
            outcome.preset_written = write_preset(req.write_pack, loaded, req.preset_name, desc,
                                                  merged_flags(base, best.config))
            outcome.pack_file = req.write_pack
        except ServepackError as exc:  # after every trial: what was measured is written before the error
            outcome.reasons.append(f"--write-pack {req.write_pack}: not written ({str(exc).splitlines()[0]})")
            _write_result(outcome)
            raise
    _write_result(outcome)
    if not any(t.status in ("ok", "infeasible") for t in history):
        # as capacity does: a tune that measured nothing is an error, whatever it wrote
        first = next((t for t in history if t.reason), None)
        why = (f"; first: trial {first.trial} {first.key or '(base preset)'}: {(first.reason or '').rstrip(':')}"
               if first else "")
        raise EngineError(f"tune measured nothing: {len(history)} trial(s), none served and benched{why}; "
                          f"trials.jsonl and tune_result.json kept in {tune_dir}")
    return outcome


def _check_new_out(out: Path | None) -> None:
    """A new tune's --out: the results rule (`store.check_new_out`: new or empty), a tune already there named as one
    to continue with --resume. `--resume DIR` takes its own folder as it is."""
    if out is None:
        return
    if not out.is_symlink() and (out / PLAN_NAME).is_file():
        raise UsageError(f"--out {out}: a tune is already there; continue it with --resume {out}, or choose a new "
                         "folder")
    check_new_out(out)


def _new_dir(req: TuneRequest, plan: TunePlan) -> Path:
    """A new tune's folder; `tune` checked --out first (`_check_new_out`), `ResultsDir.create` checks it again as it
    is made."""
    tune_dir = (ResultsDir.create(req.out) if req.out else
                ResultsDir.new(Settings.load().results_dir, plan.pack_id, "tune")).path
    write_plan(tune_dir, plan)
    return tune_dir


def _baseline_of(plan: TunePlan, history: list[TrialRecord]) -> dict[str, Any]:
    base = next((t for t in history if t.phase == "baseline"), None)
    return dict(base.config) if base else {}


def result_doc(o: TuneOutcome) -> dict[str, Any]:
    arms = arms_of(o.plan, o.trials)
    base = arms.get(config_key(_baseline_of(o.plan, o.trials)))
    return {
        "schema_version": "servepack.tune.result/v1", "tune_dir": str(o.tune_dir), "pack_id": o.plan.pack_id,
        "objective": o.plan.objective.model_dump(), "trials": len(o.trials),
        "accepted": sum(1 for t in o.trials if t.status == "ok"),
        "rejected": [{"trial": t.trial, "key": t.key, "reason": t.reason} for t in o.trials if t.status != "ok"],
        "pruned": o.pruned,
        "best": None if o.best is None else {"key": o.best.key, "config": o.best.config, "median": o.best.median,
                                              "ci95": list(o.best.ci), "trials": o.best.trials},
        "baseline": None if base is None or not base.usable else {"key": base.key, "median": base.median,
                                                                   "ci95": list(base.ci)},
        "decision": o.decision, "reasons": o.reasons,
        "comparison": o.comparison.as_dict() if o.comparison else None,
        "pack_file": str(o.pack_file) if o.pack_file else None, "preset": o.preset_written,
    }


def _write_result(o: TuneOutcome) -> None:
    path = o.tune_dir / RESULT_NAME
    k = 1
    while path.exists():  # a resumed tune writes its own result beside the earlier one
        k += 1
        path = o.tune_dir / f"tune_result.{k}.json"
    ResultsDir(o.tune_dir).write_json(path.name, result_doc(o))
