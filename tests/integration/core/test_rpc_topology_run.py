"""An RPC topology through the session with stand-ins: the fake llama-server as the head, a stand-in rpc-server
(servepack.testing.fake_rpc_server) behind real `servepack worker` processes on loopback."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from servepack.engine.server import free_port
from servepack.errors import EngineError, ServerDied, UsageError
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session

WORKERS = """
[topology]
presets = ["p"]
tensor_split = [1, 1, 1]
[[topology.workers]]
port = 0
start = true
devices = ["CPU"]
threads = 1
[[topology.workers]]
port = 0
start = true
threads = 1
"""


def fake_rpc_bin(directory: Path) -> Path:
    exe = directory / "ggml-rpc-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m servepack.testing.fake_rpc_server \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.fixture
def rpc_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = fake_rpc_bin(tmp_path)
    monkeypatch.setenv("SERVEPACK_RPC_SERVER", str(exe))
    return exe


def with_topology(pack: Path, topology: str) -> Path:
    pack.write_text(pack.read_text() + topology)
    return pack


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie has exited; only its parent has not collected it
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_a_run_starts_its_workers_and_records_every_process(tiny_pack: Path, fake_server_bin: Path, rpc_bin: Path,
                                                            tmp_path: Path) -> None:
    pack = with_topology(tiny_pack, WORKERS)
    out = tmp_path / "run"
    with open_session(plan_run(str(pack), options=RunOptions(out=out, kind="bench", server_bin=fake_server_bin))) as s:
        procs = s.endpoint.processes
        assert [p.role for p in procs] == ["head", "rpc-worker", "rpc-worker"]
        addresses = [p.endpoint for p in procs[1:]]
        head_argv = procs[0].argv
        assert head_argv[head_argv.index("--rpc") + 1] == ",".join(a or "" for a in addresses)
        assert head_argv[head_argv.index("--tensor-split") + 1] == "1,1,1"
        s.endpoint.check_alive()
        pids = [p.pid for p in procs if p.pid]
        assert len(pids) == 3
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "complete"
    recorded = receipt["server"]["processes"]
    sha = hashlib.sha256(rpc_bin.read_bytes()).hexdigest()
    assert [p["role"] for p in recorded] == ["head", "rpc-worker", "rpc-worker"]
    assert all(p["fingerprint"] and p["fingerprint"]["hostname"] for p in recorded)
    for w in recorded[1:]:
        assert w["argv"][0] == str(rpc_bin.resolve()) and w["binary_sha256"] == sha and w["rpc_protocol"] == "7.0.0"
        assert w["argv"][w["argv"].index("--threads") + 1] == "1" and w["host"] == "127.0.0.1"
        assert (out / w["log"]).is_file() and w["log"] in receipt["files"]
    assert recorded[1]["argv"][recorded[1]["argv"].index("--device") + 1] == "CPU"
    hw = receipt["hardware"]
    assert [h["role"] for h in hw["topology"]] == ["head", "rpc-worker", "rpc-worker"]
    assert hw["attributed_id"] == ".".join(["rpc", *(h["detected_id"] for h in hw["topology"])])
    assert not any("not identified" in r for r in receipt["claim"]["reasons"])
    time.sleep(0.5)
    assert all(gone(pid) for pid in pids), "nothing is left running"


def test_a_worker_that_dies_mid_run_is_named_and_nothing_is_orphaned(tiny_pack: Path, fake_server_bin: Path,
                                                                     rpc_bin: Path, tmp_path: Path) -> None:
    pack = with_topology(tiny_pack, WORKERS)
    out = tmp_path / "run"
    pids: list[int] = []
    with pytest.raises(ServerDied, match=r"RPC worker 127\.0\.0\.1:\d+ .*exited|RPC worker 127\.0\.0\.1:\d+ stopped"):
        with open_session(plan_run(str(pack), options=RunOptions(out=out, kind="bench",
                                                                 server_bin=fake_server_bin))) as s:
            procs = s.endpoint.processes
            pids = [p.pid for p in procs if p.pid]
            worker = procs[2]
            assert worker.pid is not None
            os.kill(worker.pid, signal.SIGKILL)  # the rpc-server itself, not its `servepack worker`
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                s.endpoint.check_alive()
                time.sleep(0.1)
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "partial" and str(procs[2].endpoint) in receipt["error"]
    assert receipt["server"]["processes"][2]["exit_code"] is not None
    time.sleep(0.5)
    assert all(gone(pid) for pid in pids), "head and workers are all stopped"
    assert list(out.glob(".*.pid.json")) == [], "no stamp of a running server is left"


def test_an_unreachable_worker_stops_the_run_before_loading(tiny_pack: Path, fake_server_bin: Path,
                                                            tmp_path: Path) -> None:
    port = free_port()
    pack = with_topology(tiny_pack, f'[topology]\npresets = ["p"]\n[[topology.workers]]\nport = {port}\n')
    out = tmp_path / "run"
    with pytest.raises(EngineError, match=rf"RPC worker 127\.0\.0\.1:{port} is not reachable"):
        with open_session(plan_run(str(pack), options=RunOptions(out=out, kind="bench", server_bin=fake_server_bin))):
            pass
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "failed" and receipt["server"]["processes"] == []
    assert not (out / "server.log").exists(), "the head was never started"


def test_a_worker_the_run_starts_that_fails_is_named(tiny_pack: Path, fake_server_bin: Path, rpc_bin: Path,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_RPC_MODE", "die_early")
    pack = with_topology(tiny_pack, WORKERS)
    with pytest.raises(EngineError, match=r"RPC worker 127\.0\.0\.1:\d+ exited with code"):
        with open_session(plan_run(str(pack), options=RunOptions(out=tmp_path / "run", kind="bench",
                                                                 server_bin=fake_server_bin))):
            pass


def _worker(args: list[str], rpc_bin: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "servepack.cli.main", "worker", *args, "--rpc-server", str(rpc_bin)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_json(url: str, proc: subprocess.Popen[str], timeout_s: float = 30) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            r = httpx.get(url, timeout=2)
            if r.status_code == 200:
                body: dict[str, object] = r.json()
                return body
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def test_servepack_worker_serves_its_fingerprint_and_says_what_the_head_needs(rpc_bin: Path) -> None:
    port = free_port()
    with socket.socket() as s:  # the worker needs port + 1 too; skip the rare case it is taken
        try:
            s.bind(("127.0.0.1", port + 1))
        except OSError:
            pytest.skip("port + 1 taken")
    proc = _worker(["--port", str(port), "--device", "CPU"], rpc_bin)
    try:
        info = _wait_json(f"http://127.0.0.1:{port + 1}/fingerprint", proc)
        assert info["schema_version"] == "servepack.rpc-worker/v1" and info["endpoint"] == f"127.0.0.1:{port}"
        rpc = info["rpc_server"]
        assert isinstance(rpc, dict) and rpc["protocol"] == "7.0.0"
        assert rpc["argv"] == [str(rpc_bin.resolve()), "--host", "127.0.0.1", "--port", str(port), "--device", "CPU"]
        assert httpx.get(f"http://127.0.0.1:{port + 1}/health", timeout=2).status_code == 200
        os.kill(int(rpc["pid"]), signal.SIGKILL)
        code = proc.wait(10)
        _, err = proc.communicate()
        assert code != 0
        assert f"--rpc 127.0.0.1:{port}" in err and "[[topology.workers]]" in err and f"port = {port}" in err
        assert "rpc-server exited with code" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_servepack_worker_refuses_a_public_address_and_says_why(rpc_bin: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "servepack.cli.main", "worker", "--host", "0.0.0.0",
                           "--rpc-server", str(rpc_bin)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == UsageError.exit_code, done.stderr
    assert "refusing to bind every interface" in done.stderr and "no authentication" in done.stderr
    assert "--i-understand-rpc-is-unauthenticated" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.needs("unshare", "ip")
def test_a_public_bind_with_the_opt_in_warns_inside_an_empty_netns(rpc_bin: Path) -> None:
    """Bound on every interface only inside `unshare -n` (nothing but its own loopback exists there)."""
    probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("network namespaces not available here")
    script = (
        "import subprocess, sys, time, httpx\n"
        f"p = subprocess.Popen([sys.executable, '-m', 'servepack.cli.main', 'worker', '--host', '0.0.0.0', '--port', "
        f"'50052', '--rpc-server', {str(rpc_bin)!r}, '--i-understand-rpc-is-unauthenticated'], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
        "ok = False\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        ok = httpx.get('http://127.0.0.1:50053/fingerprint', timeout=1).status_code == 200\n"
        "    except httpx.HTTPError:\n"
        "        pass\n"
        "    if ok or p.poll() is not None:\n"
        "        break\n"
        "    time.sleep(0.1)\n"
        "p.terminate()\n"
        "print('served' if ok else 'not served', p.communicate()[1])\n"
    )
    done = subprocess.run(["unshare", "-n", "sh", "-c", f'ip link set lo up && exec "{sys.executable}" -c "$0"',
                           script], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.startswith("served"), done.stdout + done.stderr
    assert "WARNING: 0.0.0.0:50052 is off loopback and llama.cpp's RPC is unauthenticated" in done.stdout
    assert "--rpc ADDRESS:50052" in done.stdout, "0.0.0.0 is no address a head can reach"


def test_workers_die_with_a_killed_servepack(tiny_pack: Path, fake_server_bin: Path, rpc_bin: Path,
                                             tmp_path: Path) -> None:
    """SIGKILL leaves no `finally` to run: the head and every worker die with servepack all the same."""
    pack = with_topology(tiny_pack, WORKERS)
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from servepack.plan import RunOptions, plan_run\n"
        "from servepack.session import open_session\n"
        f"with open_session(plan_run({str(pack)!r}, options=RunOptions(out=Path({str(tmp_path / 'run')!r}), "
        f"kind='bench', server_bin=Path({str(fake_server_bin)!r})))) as s:\n"
        "    pids = [p.pid for p in s.endpoint.processes] + [w.pid for w in s.endpoint.watch if hasattr(w, 'pid')]\n"
        "    print(' '.join(map(str, pids)), flush=True)\n"
        "    time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 6, line  # head, two rpc-servers; head and two `servepack worker` processes
        assert not any(gone(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(gone(p) for p in pids):
        time.sleep(0.1)
    assert all(gone(p) for p in pids), [p for p in pids if not gone(p)]
