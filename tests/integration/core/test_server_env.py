"""Issue 25 item 2: the server's environment is built from an allow-list. `LLAMA_ARG_*` (flags in disguise), tokens
and keys in servepack's environment never reach a server, llama-bench or an RPC worker; the receipt names what was
dropped, never a value."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from servepack.bench.llama_bench import run_llama_bench
from servepack.engine.environ import server_env
from servepack.engine.rpc import worker_env
from servepack.errors import EngineError, UsageError
from servepack.packs.schema import RpcWorker
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session

sys.path.insert(0, str(Path(__file__).parents[2] / "unit" / "engine"))

from vllm_fixtures import vllm_pack, write_vllm_bin

TOKEN = "hf_live_5e4d3c2b1a0f9e8d"
HOSTILE_ENV = {
    "LLAMA_ARG_TOOLS": "all",
    "LLAMA_ARG_PATH": "/",
    "HF_TOKEN": TOKEN,
    "VLLM_API_KEY": "vk-" + TOKEN,
    "OPENAI_API_KEY": "sk-" + TOKEN,
}


def _env_dumping(directory: Path, dump: Path, then: str) -> Path:
    """An executable that writes its environment (NUL-separated) to `dump`, then runs `then`."""
    exe = directory / "dumps-env"
    exe.write_text(f"#!/bin/sh\n{sys.executable} -c 'import os, sys; open(sys.argv[1], \"ab\").write("
                   f"b\"\\0\".join(k.encode() + b\"=\" + v.encode() for k, v in os.environ.items()) + b\"\\0\\0\")' "
                   f"{dump}\n{then}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _last_env(dump: Path) -> dict[str, str]:
    block = dump.read_bytes().split(b"\0\0")[-2]
    return dict(item.decode().split("=", 1) for item in block.split(b"\0") if item)


@pytest.fixture
def hostile_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    escaped = tmp_path / "elsewhere" / "server.log"
    escaped.parent.mkdir()
    for k, v in HOSTILE_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("LLAMA_ARG_LOG_FILE", str(escaped))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    return escaped


def test_llama_arg_and_secrets_do_not_reach_the_server(tiny_pack: Path, tmp_path: Path, hostile_env: Path) -> None:
    dump = tmp_path / "env.bin"
    server = _env_dumping(tmp_path, dump, f'exec {sys.executable} -m servepack.testing.fake_server "$@"')
    out = tmp_path / "run"
    with open_session(plan_run(str(tiny_pack), options=RunOptions(out=out, server_bin=server))):
        pass
    got = _last_env(dump)  # the launch (the --version probe dumped before it, through the same allow-list)
    assert not [k for k in got if k.startswith("LLAMA_ARG_")], got
    assert not {"HF_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY"} & set(got)
    assert got["CUDA_VISIBLE_DEVICES"] == "0" and got["PATH"]  # what a server needs still passes
    for block in dump.read_bytes().split(b"\0\0"):  # the version probe too
        assert TOKEN.encode() not in block and b"LLAMA_ARG_" not in block
    assert not hostile_env.exists()  # the log stayed in the run
    receipt = json.loads((out / "receipt.json").read_text())
    dropped = receipt["environment_dropped"]
    assert {"LLAMA_ARG_TOOLS", "LLAMA_ARG_PATH", "LLAMA_ARG_LOG_FILE", "HF_TOKEN", "VLLM_API_KEY",
            "OPENAI_API_KEY"} <= set(dropped)
    assert "PATH" not in dropped and "CUDA_VISIBLE_DEVICES" not in dropped
    assert receipt["environment"].get("CUDA_VISIBLE_DEVICES") == "0"
    assert not any(k.startswith("LLAMA_ARG_") for k in receipt["environment"])
    for path in out.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path.name  # names only, never values


def test_naming_a_flag_variable_to_pass_is_refused_before_launch(tiny_pack: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "env.bin"
    monkeypatch.setenv("LLAMA_ARG_TOOLS", "all")
    monkeypatch.setenv("SERVEPACK_SERVER_ENV", "FAKE_MODE,LLAMA_ARG_TOOLS")
    with pytest.raises(UsageError, match=r"SERVEPACK_SERVER_ENV: LLAMA_ARG_TOOLS cannot be passed to the server"):
        with open_session(plan_run(str(tiny_pack), options=RunOptions(
                out=tmp_path / "run", server_bin=_env_dumping(tmp_path, marker, "exit 1")))):
            pass
    assert not marker.exists() and not (tmp_path / "run").exists()
    monkeypatch.setenv("SERVEPACK_SERVER_ENV", "HF_TOKEN")
    with pytest.raises(UsageError, match="HF_TOKEN cannot be passed"):
        server_env()


def test_a_variable_named_to_pass_reaches_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_CUDA_ENABLE_UNIFIED_MEMORY", "1")
    monkeypatch.setenv("SERVEPACK_SERVER_ENV", "")
    assert "GGML_CUDA_ENABLE_UNIFIED_MEMORY" in server_env().dropped
    monkeypatch.setenv("SERVEPACK_SERVER_ENV", "GGML_CUDA_ENABLE_UNIFIED_MEMORY")
    assert server_env().env["GGML_CUDA_ENABLE_UNIFIED_MEMORY"] == "1"


def test_llama_bench_gets_the_allow_listed_environment(tmp_path: Path, hostile_env: Path) -> None:
    dump = tmp_path / "env.bin"
    bench = _env_dumping(tmp_path, dump, "echo '[]'")
    with pytest.raises(EngineError, match="with 0 results"):
        run_llama_bench(bench, tmp_path / "m.gguf", {}, prompt_tokens=[8], gen_tokens=[4], repetitions=1)
    got = _last_env(dump)
    assert not [k for k in got if k.startswith("LLAMA_ARG_") or k in HOSTILE_ENV]
    assert got["CUDA_VISIBLE_DEVICES"] == "0"


def test_each_kind_of_process_gets_its_own_list(monkeypatch: pytest.MonkeyPatch) -> None:
    source = {"PATH": "/bin", "LC_ALL": "C", "HF_HOME": "/h", "NCCL_SOCKET_IFNAME": "eth0", "SERVEPACK_X": "1",
              "LLAMA_ARG_RPC": "10.0.0.1:1", "VLLM_API_KEY": "k", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
              "LD_PRELOAD": "/tmp/evil.so"}
    monkeypatch.setenv("SERVEPACK_SERVER_ENV", "")
    native = server_env("native", source=source)
    assert native.env == {"PATH": "/bin", "LC_ALL": "C"}
    assert native.dropped == tuple(sorted(set(source) - {"PATH", "LC_ALL"}))
    python = server_env("python", source=source)
    assert python.env == {"PATH": "/bin", "LC_ALL": "C", "HF_HOME": "/h", "NCCL_SOCKET_IFNAME": "eth0"}
    own = server_env("servepack", source=source, set_vars={"CUDA_VISIBLE_DEVICES": "1"})
    assert own.env["SERVEPACK_X"] == "1" and own.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "LLAMA_ARG_RPC" not in own.env and "VLLM_API_KEY" not in own.env and "LD_PRELOAD" not in own.env


def test_an_rpc_worker_gets_servepacks_settings_but_no_server_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_ARG_RPC", "10.9.8.7:50052")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("SERVEPACK_RPC_SERVER", "/opt/rpc-server")
    env = worker_env(RpcWorker(port=0, start=True, cuda_visible_devices="1"))
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["SERVEPACK_RPC_SERVER"] == "/opt/rpc-server"
    assert "LLAMA_ARG_RPC" not in env and "HF_TOKEN" not in env


def test_vllm_gets_its_caches_but_no_api_key_or_flag_variables(tmp_path: Path, hostile_env: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    write_vllm_bin(bindir)
    record = tmp_path / "standin.json"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("VLLM_STANDIN_RECORD", str(record))
    monkeypatch.delenv("VLLM_STANDIN_MODE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1")
    pack = vllm_pack(tmp_path)
    with open_session(plan_run(str(pack), options=RunOptions(out=tmp_path / "run"))):
        pid = json.loads(record.read_text())["pid"]
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    got = dict(item.decode().split("=", 1) for item in raw.split(b"\0") if item)
    assert got["HF_HOME"] == str(tmp_path / "hf")  # a Python engine keeps its caches
    assert not {"VLLM_API_KEY", "HF_TOKEN", "OPENAI_API_KEY", "VLLM_ALLOW_RUNTIME_LORA_UPDATING"} & set(got)
    assert not [k for k in got if k.startswith("LLAMA_ARG_")] and TOKEN.encode() not in raw
    dropped = json.loads((tmp_path / "run" / "receipt.json").read_text())["environment_dropped"]
    assert {"VLLM_API_KEY", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "HF_TOKEN"} <= set(dropped) and "HF_HOME" not in dropped
