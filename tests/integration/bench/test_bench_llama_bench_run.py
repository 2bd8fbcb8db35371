"""run_llama_bench on a stand-in binary that mixes log lines into its JSON, as llama-bench does."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from servepack.bench.llama_bench import run_llama_bench
from servepack.errors import EngineError

FAKE = r"""#!/bin/sh
echo "$@" > "$(dirname "$0")/argv.txt"
echo "load_backend: loaded CPU backend from libggml-cpu.so"
echo "["
echo '  {"n_prompt": 256, "n_gen": 0, "n_depth": 0, "avg_ts": 150.5, "stddev_ts": 1.5, "samples_ts": [149, 152]},'
echo "llama_context: a log line printed between results"
echo '  {"n_prompt": 0, "n_gen": 32, "n_depth": 0, "avg_ts": 35.2, "stddev_ts": 0.2, "samples_ts": [35.0, 35.4]}'
echo "]"
exit ${FAKE_EXIT:-0}
"""


def _fake(tmp_path: Path) -> Path:
    exe = tmp_path / "llama-bench"
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_runs_parses_and_maps_flags(tmp_path: Path) -> None:
    exe = _fake(tmp_path)
    res = run_llama_bench(exe, tmp_path / "m.gguf", {"n-gpu-layers": 0, "flash-attn": "on", "ctx-size": 4096},
                          prompt_tokens=[256], gen_tokens=[32], repetitions=2)
    assert [(t.kind, t.avg_ts) for t in res.tests] == [("pp", 150.5), ("tg", 35.2)]
    assert res.ignored_lines == 2
    argv = (tmp_path / "argv.txt").read_text().split()
    assert argv[argv.index("-p") + 1] == "256" and argv[argv.index("-ngl") + 1] == "0"
    assert argv[argv.index("-fa") + 1] == "1" and "-o" in argv and "--ctx-size" not in argv


def test_failure_is_an_engine_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_EXIT", "3")
    with pytest.raises(EngineError, match="exited 3"):
        run_llama_bench(_fake(tmp_path), tmp_path / "m.gguf", {}, prompt_tokens=[8], gen_tokens=[8], repetitions=1)


def test_the_result_names_the_variables_llama_bench_did_not_get(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_ARG_N_GPU_LAYERS", "99")  # llama-bench would read it as -ngl behind the preset
    res = run_llama_bench(_fake(tmp_path), tmp_path / "m.gguf", {}, prompt_tokens=[8], gen_tokens=[8], repetitions=1)
    assert "LLAMA_ARG_N_GPU_LAYERS" in res.environment_dropped and "PATH" not in res.environment_dropped
    assert not any("=" in n for n in res.environment_dropped)  # names, never NAME=value
