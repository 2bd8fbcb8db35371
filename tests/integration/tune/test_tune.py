"""`servepack tune` against the surface stand-in: rejected trials archived, constraints, guard, resume, outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import psutil
import pytest
from tune_fixtures import make_tune_pack, write_space

import servepack.host.memory as memory_mod
from servepack.errors import EngineError
from servepack.packs import load_pack_file
from servepack.pipeline.tune import TuneRequest, tune
from servepack.tune.space import config_key


def _trials(tune_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tune_dir / "trials.jsonl").read_text().splitlines()]


def _receipt(path: Path) -> dict[str, Any]:
    return json.loads((path / "receipt.json").read_text())


def _no_server_left(tune_dir: Path) -> None:
    for receipt in tune_dir.rglob("receipt.json"):
        pid = json.loads(receipt.read_text())["server"]["pid"]
        if pid is not None and psutil.pid_exists(pid):
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"server {pid} left running"


SPACE = """
[tune]
threads = [8, 12]
batch-size = [512, 2048]
ubatch-size = [512, 1024]
flash-attn = ["off", "on"]
"""


def test_tune_archives_rejected_trials_keeps_constraints_and_writes_the_best(
        tune_pack: Path, surface_bin: Path, tmp_path: Path) -> None:
    model_copy = tmp_path / "elsewhere" / "twin.gguf"
    model_copy.parent.mkdir()
    shutil.copy(tmp_path / "tiny.gguf", model_copy)
    out, mine = tmp_path / "tune", tmp_path / "mine.toml"
    said: list[str] = []
    outcome = tune(TuneRequest(pack_ref=str(tune_pack), space_file=write_space(tmp_path, SPACE), budget_trials=15,
                               server_bin=surface_bin, model_file=model_copy, out=out, write_pack=mine),
                   said.append)
    trials = _trials(out)
    # baseline + the 12 configurations that hold ubatch ≤ batch, then a race that may end early (arms separated)
    assert 13 <= len(trials) <= 15 and [t["trial"] for t in trials] == list(range(1, len(trials) + 1))
    assert [t["phase"] for t in trials[13:]] == ["race"] * (len(trials) - 13)
    # ubatch ≤ batch is respected: never launched, not tried-and-failed
    assert not [t for t in trials if t["config"].get("batch-size") == 512 and t["config"].get("ubatch-size") == 1024]
    by_key = {t["key"]: t for t in trials}
    # the surface refuses to load 2048/1024 without flash attention: rejected with the reason and the log's tail
    for threads in (8, 12):
        t = by_key[config_key({"threads": threads, "batch-size": 2048, "ubatch-size": 1024, "flash-attn": "off"})]
        assert t["status"] == "rejected" and "before it was healthy" in t["reason"]
        assert "failed to allocate compute buffer" in t["log_tail"]
        assert (out / t["results_dir"] / "receipt.json").is_file()
    # 12 threads, flash attention, ubatch 512 crashes on its second request
    crashed = [by_key[config_key({"threads": 12, "batch-size": b, "ubatch-size": 512, "flash-attn": "on"})]
               for b in (512, 2048)]
    for t in crashed:
        assert t["status"] == "rejected" and ("exited" in t["reason"] or "died" in t["reason"]), t["reason"]
        assert "GGML_ASSERT" in t["log_tail"]
    assert trials[0]["phase"] == "baseline" and trials[0]["config"] == {"threads": 4, "flash-attn": "off"}
    ok = [t for t in trials if t["status"] == "ok"]
    assert all(t["figures"]["decode_tok_s"]["n"] == 3 and len(t["samples"]) == 3 for t in ok)
    # --server-bin and --model-file reach every trial's server
    argv = _receipt(out / trials[1]["results_dir"])["server"]["argv"]
    assert argv[0] == str(surface_bin) and argv[argv.index("--model") + 1] == str(model_copy)
    assert outcome.best is not None
    assert outcome.best.config["threads"] == 8 and outcome.best.config["flash-attn"] == "on"
    # best vs the base preset (4 threads, no flash attention): far faster in decode and prefill
    assert outcome.decision == "PROMOTE", outcome.reasons
    assert (out / "compare" / "1" / "baseline" / "receipt.json").is_file()
    written = load_pack_file(mine).pack.presets["tuned"]
    assert written.role == "candidate" and written.flags["threads"] == 8 and written.flags["flash-attn"] == "on"
    assert written.flags["ctx-size"] == 512 and written.flags["alias"] == "tiny"
    result = json.loads((out / "tune_result.json").read_text())
    assert result["decision"] == "PROMOTE" and result["preset"] == "tuned" and len(result["rejected"]) >= 4
    assert any(m.startswith("trial 13/15 (screen)") for m in said)
    _no_server_left(out)


def test_memory_guard_rejects_the_trial_that_trips_it(tmp_path: Path, surface_bin: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The surface's 6-thread 2048/1024 configuration marks itself; host memory reads low while it runs."""
    pack = make_tune_pack(tmp_path, guard_gb=0.5)
    hog = tmp_path / "hog.pid"
    monkeypatch.setenv("SURFACE_HOG_FILE", str(hog))
    real = memory_mod.host_memory

    def low_while_hog_runs() -> tuple[int, int, int]:
        available, swap_free, swap_total = real()
        try:  # the hog may exit between the check and the read: then memory is as it is
            pid = int(hog.read_text() or 0) if hog.is_file() else 0
            if pid > 0 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return 100 << 20, swap_free, swap_total
        except (psutil.NoSuchProcess, ValueError):
            pass
        return available, swap_free, swap_total

    monkeypatch.setattr(memory_mod, "host_memory", low_while_hog_runs)  # what the sampler reads the host by
    space = write_space(tmp_path, "[tune]\nthreads = 6\nbatch-size = 2048\nubatch-size = [512, 1024]\n"
                                  'flash-attn = "on"\n')
    out = tmp_path / "tune"
    outcome = tune(TuneRequest(pack_ref=str(pack), space_file=space, server_bin=surface_bin, out=out, budget_trials=3))
    by_key = {t["key"]: t for t in _trials(out)}
    hogged = by_key[config_key({"threads": 6, "batch-size": 2048, "ubatch-size": 1024, "flash-attn": "on"})]
    assert hogged["status"] == "rejected" and "guard min_available_ram_gb tripped" in hogged["reason"]
    assert hogged["log_tail"] and "surface llama-server argv" in hogged["log_tail"]
    fine = by_key[config_key({"threads": 6, "batch-size": 2048, "ubatch-size": 512, "flash-attn": "on"})]
    assert fine["status"] == "ok"
    assert outcome.best is not None and outcome.best.config["ubatch-size"] == 512
    _no_server_left(out)


class Interrupt(KeyboardInterrupt):
    pass


def test_resume_after_interruption_continues_the_log(tune_pack: Path, surface_bin: Path, tmp_path: Path) -> None:
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8]\nubatch-size = [256, 512]\nflash-attn = "on"\n')
    out = tmp_path / "tune"

    def stop_after_third(message: str) -> None:
        if message.startswith("trial 3/"):
            raise Interrupt

    with pytest.raises(Interrupt):
        tune(TuneRequest(pack_ref=str(tune_pack), space_file=space, server_bin=surface_bin, out=out,
                         budget_trials=6), stop_after_third)
    first = _trials(out)
    assert [t["trial"] for t in first] == [1, 2, 3]
    _no_server_left(out)
    (out / "trials" / "004").mkdir()  # what a trial killed mid-run leaves behind
    (out / "trials" / "004" / "server.log").write_text("half a trial\n")
    said: list[str] = []
    outcome = tune(TuneRequest(resume=out), said.append)
    trials = _trials(out)
    # the screen finishes (trials 4-5); the race may stop at once when the arms' intervals already separate
    assert [t["trial"] for t in trials] in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6])
    assert trials[:3] == first
    screen_keys = [t["key"] for t in trials if t["phase"] != "race"]
    assert len(screen_keys) == len(set(screen_keys)) == 5  # baseline + the 4 configurations, none measured twice
    assert (out / "trials" / "004.interrupted" / "server.log").read_text() == "half a trial\n"
    assert said[0].startswith(f"resuming {out}: 3 trials")
    assert outcome.best is not None and outcome.best.config["threads"] == 8
    _no_server_left(out)


def test_a_tune_where_every_trial_fails_says_so(tune_pack: Path, surface_bin: Path, tmp_path: Path) -> None:
    space = write_space(tmp_path, '[tune]\nthreads = 16\nubatch-size = 1024\nbatch-size = 2048\n')
    out = tmp_path / "tune"
    pack_text = tune_pack.read_text().replace('threads = 4\nflash-attn = "off"\n',
                                              'threads = 16\nubatch-size = 1024\nflash-attn = "on"\n')
    tune_pack.write_text(pack_text)
    with pytest.raises(EngineError, match=r"tune measured nothing: 2 trial\(s\), none served and benched; first: "
                                          r"trial 1 threads=16 ubatch-size=1024: llama-server exited with code 1 "
                                          r"before it was healthy; log \S+server.log; trials.jsonl .* kept in"):
        tune(TuneRequest(pack_ref=str(tune_pack), space_file=space, server_bin=surface_bin, out=out))
    trials = _trials(out)
    assert {t["status"] for t in trials} == {"rejected"}
    assert all("invalid thread pool" in t["log_tail"] for t in trials)
    result = json.loads((out / "tune_result.json").read_text())  # what was tried is kept, and says why
    assert result["best"] is None and result["decision"] == "INCONCLUSIVE" and result["accepted"] == 0
    assert "no trial was accepted" in result["reasons"][0]


def test_a_ttft_ceiling_makes_slow_trials_infeasible_not_winners(tune_pack: Path, surface_bin: Path,
                                                                 tmp_path: Path) -> None:
    space = write_space(tmp_path, '[tune]\nthreads = 8\nflash-attn = "on"\n')
    out = tmp_path / "tune"
    outcome = tune(TuneRequest(pack_ref=str(tune_pack), space_file=space, server_bin=surface_bin, out=out,
                               max_ttft_ms=0.001))
    trials = _trials(out)
    assert len(trials) == 2 and {t["status"] for t in trials} == {"infeasible"}
    assert all("--max-ttft-ms 0.001" in t["reason"] and t["figures"]["ttft_ms"]["median"] > 0.001 for t in trials)
    assert outcome.best is None


def test_the_time_budget_stops_new_trials(tune_pack: Path, surface_bin: Path, tmp_path: Path) -> None:
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8, 12]\nflash-attn = "on"\n')
    out, said = tmp_path / "tune", []  # type: ignore[var-annotated]
    tune(TuneRequest(pack_ref=str(tune_pack), space_file=space, server_bin=surface_bin, out=out, budget_time_s=0.5),
         said.append)
    assert len(_trials(out)) == 1  # a trial takes longer than half a second: none after the first
    assert any(m.startswith("time budget 0.5 s spent after 1 trials") for m in said)
