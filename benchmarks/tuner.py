"""Tuner quality and cost: `servepack tune` against the surface stand-in, whose true optimum is known.

The stand-in (`servepack.testing.surface_server`, run as a `llama-server` executable) serves at the decode speed a
known response surface of threads × batch × ubatch × flash-attn gives, with noise per launch and per request; some
flag sets fail to load and one crashes mid-run. The tuner runs through the engine seam exactly as on a real server
(each trial a fresh process). Printed: the configuration found, its true decode speed as a fraction of the true
best, and the cost in server launches and seconds relative to the full grid (every valid configuration screened
once with the same samples per trial). Target: within 3% of the true best at ≤ 35% of the grid's cost.

    PYTHONPATH=src .venv/bin/python benchmarks/tuner.py [--seeds 3] [--run-grid]

Without --run-grid the grid's seconds are estimated as (valid configurations) × (mean seconds of the tuner's screen
trials); --run-grid measures them by running every configuration once (minutes).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "core"))

from gguf_writer import write_gguf

from servepack.pipeline.tune import TuneRequest, run_trial, tune
from servepack.testing.surface_server import BATCH, FLASH, THREADS, UBATCH, true_decode
from servepack.tune.space import merged_flags
from servepack.tune.strategy import Proposal
from servepack.tune.trials import read_plan

BASE_FLAGS = {"ctx-size": 512, "alias": "tiny", "threads": 4, "flash-attn": "off"}
SURFACE_DEFAULTS = {"threads": 8, "batch-size": 2048, "ubatch-size": 512, "flash-attn": "auto"}
TARGET_CLOSENESS, TARGET_COST = 0.97, 0.35


def _pack(d: Path) -> Path:
    model = d / "tiny.gguf"
    write_gguf(model, {"general.architecture": "llama", "general.file_type": 1, "llama.context_length": 512},
               [("w", (64,), 0)])
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    flags = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in BASE_FLAGS.items())
    (d / "tiny.toml").write_text(f"""schema_version = "servepack.pack/v1"
id = "tiny-tuner-bench"
description = "tuner benchmark"
default_preset = "p"
[model]
name = "tiny"
quant = "F16"
file = "tiny.gguf"
model_instance_id = "tiny"
sha256 = "{sha}"
[model.source]
kind = "file"
path = "tiny.gguf"
[engine]
name = "llama.cpp"
repo = "r"
commit = "abc1234"
[hardware]
id = "cpu-generic"
label = "any"
generic = true
[hardware.match]
cpu_arch = []
[presets.p.flags]
{flags}
[bench]
preset = "p"
context_marks = [64]
gen_tokens = 32
samples = 5
[claims]
[claims.headline]
metric = "decode_tok_s"
preset = "p"
context_tokens = 64
gen_tokens = 32
[smoke]
preset = "p"
""")
    space = d / "space.toml"
    space.write_text("[tune]\n" + "\n".join(f"{k} = {list(v)!r}".replace("'", '"') for k, v in (
        ("threads", THREADS), ("batch-size", BATCH), ("ubatch-size", UBATCH), ("flash-attn", FLASH))) + "\n")
    exe = d / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m servepack.testing.surface_server \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return d / "tiny.toml"


def _truth(config: dict[str, object]) -> float:
    value = true_decode({**SURFACE_DEFAULTS, **merged_flags(BASE_FLAGS, config)})
    return value or 0.0


def _one(seed: int, run_grid: bool) -> dict[str, float | bool | str]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pack = _pack(d)
        t0 = time.monotonic()
        o = tune(TuneRequest(pack_ref=str(pack), space_file=d / "space.toml", server_bin=d / "llama-server",
                             out=d / "tune", seed=seed))
        wall = time.monotonic() - t0
        plan = read_plan(d / "tune")
        grid = plan.space.grid(plan.base_flags)
        truth = max(_truth(c) for c in grid)
        found = _truth(o.best.config) if o.best else 0.0
        screen = [t.wall_s for t in o.trials if t.phase != "race"]
        launches = len(o.trials) + (2 if o.comparison is not None else 0)
        grid_s = len(grid) * statistics.mean(screen)
        if run_grid:
            g0 = time.monotonic()
            for i, config in enumerate(grid, 1):
                run_trial(plan, Proposal("screen", config), i, d / "grid")
            grid_s = time.monotonic() - g0
        rejected = sum(1 for t in o.trials if t.status != "ok")
        print(f"seed {seed}: best {o.best.key if o.best else None} · true {found:.2f} of best {truth:.2f} tok/s "
              f"({100 * found / truth:.1f}%) · {launches} launches ({len(o.trials)} trials + compare, {rejected} "
              f"rejected) of {len(grid)} grid configurations ({100 * launches / len(grid):.0f}%) · {wall:.0f} s vs "
              f"{'measured' if run_grid else 'estimated'} grid {grid_s:.0f} s ({100 * wall / grid_s:.0f}%) · "
              f"decision {o.decision}", flush=True)
        return {"closeness": found / truth, "cost_trials": launches / len(grid), "cost_s": wall / grid_s,
                "decision": o.decision}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1, help="independent tunes (seeds 0..N-1)")
    ap.add_argument("--run-grid", action="store_true", help="measure the grid's seconds instead of estimating")
    args = ap.parse_args()
    os.environ.setdefault("SURFACE_SCALE", "2")  # the same surface, twice as fast: shorter trials
    rows = [_one(seed, args.run_grid) for seed in range(args.seeds)]
    worst = min(float(r["closeness"]) for r in rows)
    cost_t = max(float(r["cost_trials"]) for r in rows)
    cost_s = max(float(r["cost_s"]) for r in rows)
    ok = worst >= TARGET_CLOSENESS and cost_t <= TARGET_COST and cost_s <= TARGET_COST
    print(f"worst closeness {100 * worst:.1f}% (target ≥ {100 * TARGET_CLOSENESS:.0f}%) · highest cost "
          f"{100 * cost_t:.0f}% of the grid's launches, {100 * cost_s:.0f}% of its seconds (target ≤ "
          f"{100 * TARGET_COST:.0f}%) → {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
