"""Which trial comes next, from the trial log alone: baseline, screen, race. Pure: no server, no clock.

- **baseline**: the base preset as it is, once.
- **screen**: one short trial per configuration: every one of a small grid in order, or, when the grid is larger
  than `EXHAUSTIVE_LIMIT`, the ones optuna's TPE sampler proposes from the trials so far.
- **race**: the best `race_arms` screened configurations get further trials (each a fresh server); an arm stops
  being sampled once its 95% interval of the median lies wholly below the best arm's, and the race ends when one
  arm is left or each has `race_max_trials`.

Every proposal is a function of the plan and the log, so a resumed tune proposes what the interrupted one would
have. Scores are the objective oriented so that higher is better (TTFT is negated).
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servepack.bench.stats import bootstrap_median_ci, median
from servepack.packs.schema import FlagValue
from servepack.tune.space import Config, SearchSpace, canonical, config_key
from servepack.tune.trials import Phase, TrialRecord, TunePlan

EXHAUSTIVE_LIMIT = 12
RACE_ARMS = 3
RACE_MAX_TRIALS = 3
OPTUNA_ATTEMPTS = 64


@dataclass(frozen=True)
class Proposal:
    phase: Phase
    config: Config

    @property
    def key(self) -> str:
        return config_key(self.config)


@dataclass(frozen=True)
class Budget:
    """How a tune spends its trials: screen first, a reserve for the race."""

    strategy: str
    budget_trials: int
    screen_trials: int
    race_arms: int
    race_max_trials: int


def plan_budget(grid_size: int, budget_trials: int | None) -> Budget:
    """A small grid is screened whole; a large one gets about a quarter of its size in trials (≥ 12, ≤ 60)."""
    if grid_size <= EXHAUSTIVE_LIMIT:
        arms = min(RACE_ARMS, grid_size)
        total = budget_trials or grid_size + 1 + arms * (RACE_MAX_TRIALS - 1)
        return Budget("exhaustive", total, min(total, grid_size + 1), arms, RACE_MAX_TRIALS)
    total = budget_trials or min(60, max(12, math.ceil(0.25 * grid_size)))
    reserve = min(RACE_ARMS * (RACE_MAX_TRIALS - 1), total // 3)
    return Budget("optuna", total, max(1, total - reserve), RACE_ARMS, RACE_MAX_TRIALS)


@dataclass(frozen=True)
class Arm:
    """One configuration and everything measured of it, over all its trials."""

    key: str
    config: Config
    scores: tuple[float, ...]
    screen_scores: tuple[float, ...]
    trials: int
    rejected: str | None
    infeasible: str | None

    @property
    def usable(self) -> bool:
        return self.rejected is None and self.infeasible is None and bool(self.scores)

    @property
    def median(self) -> float:
        return median(self.scores)

    @property
    def ci(self) -> tuple[float, float]:
        return bootstrap_median_ci(self.scores)


def score(plan: TunePlan, value: float) -> float:
    return value if plan.objective.higher_is_better else -value


def arms_of(plan: TunePlan, history: Sequence[TrialRecord]) -> dict[str, Arm]:
    """Trials pooled per configuration; an arm rejected or infeasible once stays so."""
    grouped: dict[str, list[TrialRecord]] = {}
    for t in history:
        grouped.setdefault(t.key, []).append(t)
    out = {}
    for key, trials in grouped.items():
        ok = [t for t in trials if t.status == "ok"]
        rejected = next((t.reason or "rejected" for t in trials if t.status == "rejected"), None)
        infeasible = next((t.reason or "infeasible" for t in trials if t.status == "infeasible"), None)
        out[key] = Arm(
            key=key, config=trials[0].config, trials=len(trials), rejected=rejected, infeasible=infeasible,
            scores=tuple(score(plan, v) for t in ok for v in t.samples),
            screen_scores=tuple(score(plan, v) for t in ok if t.phase != "race" for v in t.samples),
        )
    return out


def baseline_config(plan: TunePlan) -> Config:
    """The base preset's own values of the tuned flags (flags it leaves unset stay unset)."""
    base = {canonical(k): v for k, v in plan.base_flags.items()}
    return {name: base[name] for name in plan.space.params if name in base}


def contenders(plan: TunePlan, history: Sequence[TrialRecord]) -> list[Arm]:
    """The arms raced: the best usable ones by their screen trials, at most `race_arms`."""
    arms = [a for a in arms_of(plan, history).values() if a.usable and a.screen_scores]
    arms.sort(key=lambda a: (-median(a.screen_scores), a.key))
    return arms[: plan.race_arms]


def race_state(plan: TunePlan, history: Sequence[TrialRecord]) -> tuple[list[Arm], list[Arm]]:
    """(alive, pruned) among the contenders: pruned when the 95% interval lies below the best arm's."""
    arms = arms_of(plan, history)
    current = [arms[a.key] for a in contenders(plan, history)]
    usable = [a for a in current if a.usable]
    if not usable:
        return [], current
    best = max(usable, key=lambda a: (a.median, a.key))
    best_low = best.ci[0]
    alive = [a for a in usable if a is best or a.ci[1] >= best_low]
    pruned = [a for a in current if a not in alive]
    return alive, pruned


def winner(plan: TunePlan, history: Sequence[TrialRecord]) -> Arm | None:
    alive, _ = race_state(plan, history)
    return max(alive, key=lambda a: (a.median, a.key)) if alive else None


def next_proposal(plan: TunePlan, history: Sequence[TrialRecord]) -> Proposal | None:
    """The next trial, or None when the tune is done (budget spent, grid exhausted, race decided)."""
    if len(history) >= plan.budget_trials:
        return None
    if not any(t.phase == "baseline" for t in history):
        return Proposal("baseline", baseline_config(plan))
    screened = sum(1 for t in history if t.phase != "race")
    if screened < plan.screen_trials:
        config = _screen_next(plan, history)
        if config is not None:
            return Proposal("screen", config)
    alive, _ = race_state(plan, history)
    arms = arms_of(plan, history)
    open_arms = [a for a in alive if arms[a.key].trials < plan.race_max_trials]
    if len(alive) <= 1 or not open_arms:
        return None
    pick = min(open_arms, key=lambda a: (arms[a.key].trials, -a.median, a.key))
    return Proposal("race", dict(pick.config))


def _untested(plan: TunePlan, history: Sequence[TrialRecord]) -> list[Config]:
    tested = {t.key for t in history}
    return [c for c in plan.space.grid(plan.base_flags) if config_key(c) not in tested]


def _screen_next(plan: TunePlan, history: Sequence[TrialRecord]) -> Config | None:
    untested = _untested(plan, history)
    if not untested:
        return None
    if plan.strategy == "exhaustive":
        return untested[0]
    return _optuna_next(plan, history, untested)


def _optuna_next(plan: TunePlan, history: Sequence[TrialRecord], untested: list[Config]) -> Config:
    """Ask a TPE sampler fed with every arm so far; a proposal already measured is told its value and asked again."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space: SearchSpace = plan.space
    dists: dict[str, Any] = {n: CategoricalDistribution(list(v)) for n, v in space.params.items()}
    arms = arms_of(plan, history)
    startup = max(4, min(10, plan.screen_trials // 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multivariate TPE is marked experimental
        sampler = optuna.samplers.TPESampler(seed=plan.seed + len(history), n_startup_trials=startup,
                                             multivariate=True)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for arm in arms.values():
            if not _in_space(space, arm.config):
                continue
            if arm.usable:
                study.add_trial(create_trial(params=dict(arm.config), distributions=dists, value=arm.median))
            else:
                study.add_trial(create_trial(params=dict(arm.config), distributions=dists, state=TrialState.FAIL))
        open_keys = {config_key(c) for c in untested}
        for _ in range(OPTUNA_ATTEMPTS):
            trial = study.ask(dists)
            fixed = space.repair(dict(trial.params), plan.base_flags)
            key = config_key(fixed) if fixed is not None else None
            if fixed is not None and key in open_keys:
                return fixed
            known = arms.get(key) if key else None
            if known is not None and known.usable:
                study.tell(trial, known.median)
            else:
                study.tell(trial, state=TrialState.FAIL)
    return random.Random(plan.seed + len(history)).choice(untested)


def _in_space(space: SearchSpace, config: Config) -> bool:
    def has(name: str, value: FlagValue) -> bool:
        return any(type(v) is type(value) and v == value for v in space.params[name])

    return set(config) == set(space.params) and all(has(n, v) for n, v in config.items())
