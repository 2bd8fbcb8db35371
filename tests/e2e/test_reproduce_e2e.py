"""A real run of the embedded pack, exported, then reproduced on the same machine with the same engine and model:
every fact is the same, and each metric gets a verdict in figures (one cell, a few samples)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench_plan import run_cell
from servepack.bench.stats import MIN_INTERVAL_N


def _servepack(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    code = "from servepack.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_a_real_run_exported_is_reproduced_here(tmp_path: Path) -> None:
    run = tmp_path / "qwen2.5-coder-0.5b-cpu" / "original"
    done = _servepack("bench", "--prompt-tokens", "64", "--gen-tokens", "32", "--samples", "5", "--out", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    exported = _servepack("registry", "export", str(run), "--out", str(tmp_path / "reg"), "--json")
    assert exported.returncode == 0, exported.stderr
    recipe = json.loads(exported.stdout)["recipe"]
    again = _servepack("reproduce", recipe, "--out", str(tmp_path / "again"), "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    doc = json.loads(again.stdout)
    assert doc["pack"] == "qwen2.5-coder-0.5b-cpu"  # the record's own pack, found by its pack_id
    assert [c["state"] for c in doc["comparability"]] == ["same", "same", "same"], doc["comparability"]
    # The record states the samples behind its figures, the original's clean ones (the plan's 5 on a quiet host; a
    # loaded host's contended or stalled ones are set aside, marked and replaced: tests/bench_plan.py), and the
    # reproduction plans that many; its own decode figure stands on its own clean samples.
    original = run_cell(run, 64, plan=5)
    assert doc["protocol"]["context_marks"] == [64] and doc["protocol"]["samples"] == len(original)
    reproduced = run_cell(tmp_path / "again", 64, plan=len(original))
    verdicts = {v["metric"]: v for v in doc["verdicts"]}
    assert set(verdicts) == {"decode_tok_s", "prefill_tok_s", "ttft_ms"}
    decode = verdicts["decode_tok_s"]
    assert decode["run_n"] == len(reproduced) and decode["record_median"] > 0
    # a 95% interval needs five samples (bench.stats.MIN_INTERVAL_N)
    assert (decode["run_ci95"] is not None) == (len(reproduced) >= MIN_INTERVAL_N), decode
    # on a quiet host the same engine, model and flags reproduce; a loaded host may say otherwise, in figures
    print(json.dumps({m: (v["verdict"], v["reason"]) for m, v in verdicts.items()}, indent=1))
    assert decode["verdict"] != "NOT_COMPARABLE" or decode["reason"].startswith("inconclusive"), decode["reason"]
    reg = [Path(p) for p in doc["exported"]]
    repro = json.loads(reg[0].read_text())["metadata"]["servepack"]["reproduces"]
    assert repro["record_source"] == recipe and repro["verdicts"]
