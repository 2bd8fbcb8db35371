"""`servepack run` end to end with the real engine and model: a killed server ends the run cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

SERVEPACK = [sys.executable, "-m", "servepack.cli.main"]


def _wait_for(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_sigkilled_server_ends_the_run_with_partial_results(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen([*SERVEPACK, "run", "--no-smoke", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        requests = out / "requests.jsonl"
        _wait_for(lambda: requests.exists() and requests.read_text().count("\n") >= 1, 180, "a first sample")
        servers = [c for c in psutil.Process(proc.pid).children(recursive=True) if c.name() == "llama-server"]
        assert len(servers) == 1
        server = servers[0]
        server.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("servepack: error: llama-server (pid ") and "exited with code -9 during the run" in last
    assert not psutil.pid_exists(server.pid) or server.status() == psutil.STATUS_ZOMBIE
    kept = [json.loads(x) for x in requests.read_text().splitlines()]
    assert len(kept) >= 1
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "partial" and "requests.jsonl" in receipt["files"]
    assert receipt["claim"]["eligible"] is False
