"""The strategy is a function of the plan and the trial log: baseline, screen, race; resumable by construction."""

from __future__ import annotations

import random
from typing import Any

from servepack.testing.surface_server import THREADS, UBATCH, surface, true_decode
from servepack.tune.space import build_space, config_key
from servepack.tune.strategy import next_proposal, plan_budget, race_state, winner
from servepack.tune.trials import Objective, TrialRecord, TunePlan


def _plan(params: dict[str, list[Any]], *, budget: int | None = None, base: dict[str, Any] | None = None,
          metric: str = "decode_tok_s", seed: int = 0) -> TunePlan:
    space = build_space(params, "test")
    b = plan_budget(len(space.grid(base or {})), budget)
    return TunePlan(pack_ref="p.toml", pack_id="p", base_preset="p", base_flags=base or {"ctx-size": 512},
                    space=space, objective=Objective(metric=metric, context_tokens=64, gen_tokens=16),  # type: ignore[arg-type]
                    samples=3, confirm_samples=5, budget_trials=b.budget_trials, screen_trials=b.screen_trials,
                    race_arms=b.race_arms, race_max_trials=b.race_max_trials, strategy=b.strategy,  # type: ignore[arg-type]
                    seed=seed, created_at="t")


def _record(n: int, phase: str, config: dict[str, Any], samples: list[float], status: str = "ok") -> TrialRecord:
    return TrialRecord(trial=n, phase=phase, key=config_key(config), config=config, status=status,  # type: ignore[arg-type]
                       samples=samples, results_dir=f"trials/{n:03d}", started_at="t", wall_s=1.0,
                       reason=None if status == "ok" else "failed to load")


def _run(plan: TunePlan, measure: Any) -> list[TrialRecord]:
    history: list[TrialRecord] = []
    while (p := next_proposal(plan, history)) is not None:
        samples = measure(p.config)
        history.append(_record(len(history) + 1, p.phase, p.config, samples or [], "ok" if samples else "rejected"))
    return history


def test_baseline_first_then_every_configuration_of_a_small_grid_then_a_race() -> None:
    plan = _plan({"threads": [2, 4, 8]}, base={"threads": 4, "ctx-size": 512})
    speeds = {2: 10.0, 4: 20.0, 8: 20.5}
    history = _run(plan, lambda c: [speeds[c["threads"]] + d for d in (-0.3, 0.0, 0.3)])
    phases = [(t.phase, t.config["threads"]) for t in history]
    assert phases[:4] == [("baseline", 4), ("screen", 2), ("screen", 8), phases[3]]
    assert phases[3][0] == "race"
    # 2 threads is far below: pruned after the screen, never raced
    assert not [t for t in history if t.phase == "race" and t.config["threads"] == 2]
    _alive, pruned = race_state(plan, history)
    assert [a.config["threads"] for a in pruned] == [2]
    best = winner(plan, history)
    assert best is not None and best.config["threads"] == 8


def test_an_arm_inside_the_best_arms_interval_keeps_racing_until_its_limit() -> None:
    plan = _plan({"threads": [4, 8]})
    history = _run(plan, lambda c: [20.0 + d for d in (-1.0, 0.0, 1.0)])  # identical arms: never separable
    race = [t for t in history if t.phase == "race"]
    assert len(race) == 2 * (plan.race_max_trials - 1)
    assert len(history) <= plan.budget_trials


def test_rejected_configurations_are_never_raced_or_chosen() -> None:
    plan = _plan({"threads": [2, 4, 8]})
    history = _run(plan, lambda c: None if c.get("threads") == 8 else [float(c.get("threads", 1))] * 3)
    assert [t.status for t in history if t.config.get("threads") == 8] == ["rejected"]
    best = winner(plan, history)
    assert best is not None and best.config["threads"] == 4


def test_ttft_is_minimised() -> None:
    plan = _plan({"ubatch-size": [128, 512]}, metric="ttft_ms")
    history = _run(plan, lambda c: [{128: 90.0, 512: 40.0}.get(c.get("ubatch-size", 0), 60.0)] * 3)
    best = winner(plan, history)
    assert best is not None and best.config == {"ubatch-size": 512}


def test_the_next_proposal_depends_only_on_the_log() -> None:
    params = {"threads": list(THREADS), "ubatch-size": list(UBATCH), "flash-attn": ["on", "off"]}
    plan = _plan(params, seed=3)
    rng = random.Random(0)
    history: list[TrialRecord] = []
    for _ in range(12):
        p = next_proposal(plan, history)
        assert p is not None
        assert next_proposal(plan, list(history)) == p  # asked again (a resume): the same answer
        history.append(_record(len(history) + 1, p.phase, p.config, [rng.uniform(10, 20) for _ in range(3)]))
    keys = [t.key for t in history if t.phase != "race"]
    assert len(keys) == len(set(keys))


def test_large_grid_uses_optuna_and_finds_the_surface_optimum_within_3_percent_at_a_quarter_of_the_grid() -> None:
    params = {"threads": list(THREADS), "batch-size": [256, 512, 1024, 2048], "ubatch-size": list(UBATCH),
              "flash-attn": ["on", "off"]}
    full = {"threads": 8, "batch-size": 2048, "ubatch-size": 512, "flash-attn": "auto"}
    plan = _plan(params, seed=1)
    grid = plan.space.grid(plan.base_flags)
    assert plan.strategy == "optuna" and plan.budget_trials <= 0.26 * len(grid)
    truth = max(v for c in grid if (v := true_decode(c)) is not None)
    rng = random.Random(5)

    def measure(config: dict[str, Any]) -> list[float] | None:
        c = {**full, **config}
        o = surface(int(c["threads"]), int(c["batch-size"]), int(c["ubatch-size"]), c["flash-attn"] != "off")
        if o.load_error or o.crash_after:
            return None
        launch = rng.gauss(1, 0.015)
        return [o.decode_tok_s * launch * rng.gauss(1, 0.02) for _ in range(3)]

    history = _run(plan, measure)
    best = winner(plan, history)
    assert best is not None
    found = true_decode({**full, **best.config})
    assert found is not None and found >= 0.97 * truth
    # the TPE proposals are not a scan: the 8-thread region gets more than its share
    screened = [t for t in history if t.phase == "screen"]
    assert sum(1 for t in screened if t.config["threads"] == 8) > len(screened) / len(THREADS)


def test_budget_split() -> None:
    small = plan_budget(6, None)
    assert (small.strategy, small.screen_trials) == ("exhaustive", 7)
    big = plan_budget(156, None)
    assert big.strategy == "optuna" and big.budget_trials == 39 and big.screen_trials == 33
    assert plan_budget(156, 10).screen_trials == 7


def test_an_infeasible_arm_is_never_the_winner() -> None:
    plan = _plan({"threads": [4, 8]})
    history = [_record(1, "baseline", {}, [10.0, 10.1, 10.2]),
               _record(2, "screen", {"threads": 4}, [12.0, 12.1, 12.2]),
               _record(3, "screen", {"threads": 8}, [30.0, 30.1, 30.2], status="infeasible")]
    best = winner(plan, history)
    assert best is not None and best.config == {"threads": 4}
