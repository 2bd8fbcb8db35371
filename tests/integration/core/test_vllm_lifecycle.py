"""The vLLM engine through the seam, with a stand-in `vllm` that serves the shared fake API and starts a worker.

vLLM itself cannot be installed here (no CUDA); these tests run the adapter's real launch, health gate, bench,
smoke and process-tree teardown against `servepack.testing.vllm_standin`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[2] / "unit" / "engine"))

from vllm_fixtures import COMMIT, DOCUMENTED, vllm_pack, write_vllm_bin

from servepack.cli.main import cli
from servepack.errors import EngineError
from servepack.pipeline.bench import bench_in_session
from servepack.plan import RunOptions, plan_run
from servepack.registry.export import export_records
from servepack.session import open_session
from servepack.smoke.runner import run_suite


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """The process no longer exists, or is a zombie nobody will run again."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The stand-in `vllm` (found on PATH, as a real install would be) and the file it records its argv to."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    write_vllm_bin(bindir)
    record = tmp_path / "standin.json"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("VLLM_STANDIN_RECORD", str(record))
    monkeypatch.delenv("VLLM_STANDIN_MODE", raising=False)
    return bindir / "vllm", record


def test_launch_gate_bench_smoke_and_teardown_of_the_whole_tree(tmp_path: Path, standin: tuple[Path, Path]) -> None:
    exe, record = standin
    pack = vllm_pack(tmp_path, vllm='served_model_name = "tiny-vllm"\nmax_model_len = 512\ntensor_parallel_size = 2'
                                    '\ndtype = "bfloat16"', flags="enable-prefix-caching = true")
    out = tmp_path / "run"
    with open_session(plan_run(str(pack), options=RunOptions(out=out, kind="bench"))) as s:
        assert s.model is None and s.endpoint.model == "tiny-vllm"
        assert s.engine is not None and s.engine.name == "vllm" and s.engine.path == exe.resolve()
        seen = json.loads(record.read_text())
        worker = seen["worker_pid"]
        assert Path(f"/proc/{worker}").exists()
        roles = {p.pid: p.role for p in s.endpoint.processes}
        assert roles[seen["pid"]] == "server" and roles[worker] == "worker"
        summary = bench_in_session(s, lambda _: None, context_marks=(48,), gen_tokens=6, samples=2, warmup=0,
                                   concurrency=(1,))
        smoke = run_suite(s.endpoint, "agent_smoke", s.results, max_tokens=64, modes=("nonstream",),
                          case_ids=["tool_json.weather_city"])
    assert summary.cells[0].n_ok == 2
    assert smoke.n == 1 and not any(c.startswith("TRANSPORT") for c in smoke.cases[0].codes)
    assert _gone(worker) and _gone(seen["pid"])
    # what the stand-in parsed is what the adapter meant, by vLLM's documented flag names
    assert seen["argv"][:2] == ["serve", "org/tiny"]
    assert seen["parsed"]["tensor_parallel_size"] == 2 and seen["parsed"]["revision"] == COMMIT
    assert seen["parsed"]["host"] == "127.0.0.1" and seen["extra"] == ["--enable-prefix-caching"]
    assert {t for t in seen["argv"] if t.startswith("--")} - DOCUMENTED == {"--enable-prefix-caching"}
    r = json.loads((out / "receipt.json").read_text())
    assert r["status"] == "complete" and r["server"]["launch_kind"] == "native"
    procs = r["server"]["processes"]
    assert [p["role"] for p in procs] == ["server", "worker"]
    assert procs[0]["argv"][1:] == seen["argv"] and procs[0]["exit_code"] is not None and procs[0]["log"] == "vllm.log"
    assert procs[1]["pid"] == worker and "time.sleep(600)" in " ".join(procs[1]["argv"])
    runtime = r["engine"]["runtime"]
    assert r["engine"]["version_text"] == "0.0.0+servepack.standin"
    assert runtime["vllm_import"].startswith("unavailable: import vllm failed")  # the stand-in is not vLLM
    assert set(runtime) == {"vllm_import", "torch", "cuda", "gpus"} and all(runtime.values())
    assert r["model"] is None
    assert any(x.startswith("model bytes unverified: engine vllm loads the hf-repo model itself")
               for x in r["claim"]["reasons"])
    assert any(x.startswith("engine pin not matched") for x in r["claim"]["reasons"])
    # the registry export carries the engine, the launch kind and the tensor-parallel size the run used
    recipe_path, _ = export_records(out, tmp_path / "registry")
    recipe = json.loads(recipe_path.read_text())
    assert recipe["engine"]["name"] == "vllm" and recipe["launch"]["kind"] == "native"
    assert recipe["launch"]["arguments"] == seen["argv"] and recipe["serving"]["tensor_parallel"] == 2
    assert "-vllm-tp2-" in recipe["id"] and recipe["status"] == "candidate"


def test_a_vllm_that_exits_at_start_is_an_engine_error_with_the_log_tail(
        tmp_path: Path, standin: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_STANDIN_MODE", "exit1")
    out = tmp_path / "run"
    with pytest.raises(EngineError) as err:
        with open_session(plan_run(str(vllm_pack(tmp_path)), options=RunOptions(out=out))):
            pytest.fail("the session must not start")
    msg = str(err.value)
    assert msg.startswith("vllm serve exited with code 1 before it was healthy")
    assert "stand-in refuses to load the model" in msg
    r = json.loads((out / "receipt.json").read_text())
    assert r["status"] == "failed" and r["server"]["argv"][1:3] == ["serve", "org/tiny"]


@pytest.mark.parametrize(("mode", "said"), [
    ("never_healthy", "vllm serve not healthy after 4 s"),
    ("wrong_name", "vllm serve answered /health but /v1/models did not list 'tiny-vllm'"),
])
def test_a_vllm_that_never_serves_the_model_times_out_and_its_tree_is_gone(
        tmp_path: Path, standin: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, mode: str, said: str) -> None:
    _, record = standin
    monkeypatch.setenv("VLLM_STANDIN_MODE", mode)
    monkeypatch.setenv("SERVEPACK_HEALTH_TIMEOUT_S", "4")
    with pytest.raises(EngineError, match=said) as err:
        with open_session(plan_run(str(vllm_pack(tmp_path)), options=RunOptions(out=tmp_path / "run"))):
            pytest.fail("the session must not start")
    assert "vllm stand-in serve argv" in str(err.value)  # the log's tail
    seen = json.loads(record.read_text())
    assert _gone(seen["worker_pid"]) and _gone(seen["pid"])


def test_run_dry_run_prints_the_argv_and_launches_nothing(tmp_path: Path, standin: tuple[Path, Path]) -> None:
    exe, record = standin
    pack = vllm_pack(tmp_path, vllm='nodes = 2\npipeline_parallel_size = 2\nserved_model_name = "tiny-vllm"')
    r = CliRunner().invoke(cli, ["run", str(pack), "--dry-run"])
    assert r.exit_code == 0, r.output
    argv = shlex.split(r.stdout.strip().splitlines()[-1])
    assert argv[:3] == [str(exe.resolve()), "serve", "org/tiny"]
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert not record.exists()  # the stand-in never served
    assert not any(Path(os.environ["SERVEPACK_RESULTS_DIR"]).rglob("*"))  # no run directory, no receipt


def test_dry_run_without_vllm_installed_names_the_bare_executable(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    example = Path(__file__).parents[3] / "examples" / "packs" / "vllm-qwen2.5-0.5b-instruct.toml"
    r = CliRunner().invoke(cli, ["run", str(example), "--preset", "tp2", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout[r.stdout.index("{"):])
    assert doc["engine"] == "vllm" and doc["argv"][:3] == ["vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct"]
    assert doc["argv"][doc["argv"].index("--tensor-parallel-size") + 1] == "2"
    said = " ".join(r.stderr.split())
    assert "engine not located here" in said and "vllm not found on PATH" in said


def test_doctor_checks_the_vllm_executable_and_names_the_model_it_loads(tmp_path: Path,
                                                                        standin: tuple[Path, Path]) -> None:
    from servepack.doctor import diagnose

    exe, _ = standin
    checks = {c.name: c for c in diagnose(str(vllm_pack(tmp_path))).checks}
    assert "llama-server" not in checks and "llama-bench" not in checks
    assert checks["vllm"].ok and str(exe.resolve()) in checks["vllm"].detail
    assert "pin NOT matched: installed vllm==0.0.0+servepack.standin, pin 0.8.5" in checks["vllm"].detail
    assert "vllm_import unavailable: import vllm failed" in checks["vllm"].detail
    assert checks["model"].ok and checks["model"].detail.startswith(f"org/tiny @ {COMMIT} (loaded by the engine")
