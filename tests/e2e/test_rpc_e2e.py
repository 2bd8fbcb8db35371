"""llama.cpp RPC for real, on loopback: two rpc-server workers (CPU backend) and the head with the embedded model,
all from one pinned RPC build (`make rpc-engine`). A bench cell and a smoke case run through the split; then a
worker is killed mid-run: the run ends naming it, partial results kept, nothing left running; the receipt lists
the three processes with their host fingerprints."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from servepack.engine.build import cached_build, pinned_build_dir
from servepack.errors import ServerDied
from servepack.packs import load_pack
from servepack.pipeline.bench import bench_in_session
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session
from servepack.settings import Settings
from servepack.smoke.runner import run_suite
from system_deps import missing

CASE = "no_invented.arithmetic_directly"


def rpc_build() -> tuple[Path, Path, str | None]:
    """(llama-server, rpc-server, protocol) of the pinned RPC build, or skip (fail under CI) when not built."""
    loaded = load_pack(None)
    out = pinned_build_dir(loaded, Settings.load().cache_dir, rpc=True) / "build"
    built = cached_build(out)
    if built is None or "rpc-server" not in built.binaries:
        why = f"rpc-server not built in {out}: run `make rpc-engine` (servepack engine build --from-pin --rpc)"
        missing(why, "make rpc-engine")  # `make test` builds it first: there its absence is a defect, not a skip
    return built.binaries["llama-server"], built.binaries["rpc-server"], built.record.rpc_protocol


def rpc_pack(tmp_path: Path) -> Path:
    """The embedded pack plus a preset whose layers all go to two loopback workers the run starts."""
    text = Path(load_pack(None).path).read_text()
    text += """
[presets.rpc-loopback]
description = "every layer on two loopback rpc-server workers (CPU backend)"
role = "experiment"
[presets.rpc-loopback.flags]
ctx-size = 1024
n-gpu-layers = 99
parallel = 1
jinja = true
alias = "qwen2.5-coder-0.5b"
threads = 1

[topology]
presets = ["rpc-loopback"]
tensor_split = [1, 1]
[[topology.workers]]
port = 0
start = true
devices = ["CPU"]
threads = 1
[[topology.workers]]
port = 0
start = true
devices = ["CPU"]
threads = 1
"""
    path = tmp_path / "rpc-loopback.toml"
    path.write_text(text)
    return path


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


@pytest.mark.timeout(1200)
def test_rpc_split_on_loopback_benches_smokes_and_survives_a_dead_worker(tmp_path: Path) -> None:
    server, rpc_server, protocol = rpc_build()
    pack = rpc_pack(tmp_path)
    out = tmp_path / "run"
    pids: list[int] = []
    with pytest.raises(ServerDied, match=r"RPC worker 127\.0\.0\.1:\d+"):
        # no --server-bin: a topology preset takes the head from the pinned RPC build
        with open_session(plan_run(str(pack), "rpc-loopback", RunOptions(out=out, kind="run"))) as s:
            procs = s.endpoint.processes
            assert procs[0].argv[0] == str(server)
            assert [p.role for p in procs] == ["head", "rpc-worker", "rpc-worker"]
            assert all(p.rpc_protocol == protocol for p in procs)
            pids = [p.pid for p in procs if p.pid]
            bench = bench_in_session(s, lambda _m: None, context_marks=(64,), gen_tokens=8, samples=2)
            assert bench.cells and bench.cells[0].n_ok >= 1
            smoke = run_suite(s.endpoint, "agent_smoke", s.results, max_tokens=64, case_ids=[CASE])
            assert smoke.n == 1 and all(a.error is None for c in smoke.cases for a in c.attempts)
            os.kill(procs[1].pid or 0, signal.SIGKILL)  # the first worker's rpc-server
            with httpx.Client(timeout=60) as client:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        client.post(f"{s.endpoint.base_url}/v1/chat/completions", json={
                            "model": s.endpoint.model, "max_tokens": 4,
                            "messages": [{"role": "user", "content": "hi"}]})
                    except httpx.HTTPError:
                        pass
                    s.endpoint.check_alive()
                    time.sleep(0.2)
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "partial" and "RPC worker" in receipt["error"]
    recorded = receipt["server"]["processes"]
    assert [p["role"] for p in recorded] == ["head", "rpc-worker", "rpc-worker"]
    assert all(p["fingerprint"]["hostname"] and p["binary_sha256"] for p in recorded)
    assert recorded[0]["argv"][recorded[0]["argv"].index("--rpc") + 1] == ",".join(p["endpoint"] for p in recorded[1:])
    assert {p["argv"][0] for p in recorded[1:]} == {str(rpc_server)}
    assert len(receipt["hardware"]["topology"]) == 3 and receipt["hardware"]["attributed_id"].startswith("rpc.")
    assert (out / "agent_smoke.json").is_file() and (out / "server_bench.json").is_file()
    assert "ggml-rpc" in (out / "server.log").read_text(), "the head served through the RPC backend and lost it"
    time.sleep(1)
    assert all(gone(pid) for pid in pids), "head and workers are all stopped"
