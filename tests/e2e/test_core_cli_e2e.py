"""The real binary and the real model through the `servepack` CLI: serve, teardown, one-line errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

SERVEPACK = [sys.executable, "-m", "servepack.cli.main"]


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVEPACK, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


def _llama_servers() -> set[int]:
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "llama-server"}


def test_serve_answers_and_sigterm_tears_down(tmp_path: Path) -> None:
    before = _llama_servers()
    out = tmp_path / "serve"
    proc = subprocess.Popen([*SERVEPACK, "serve", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server is healthy (or servepack exits)
        assert line.startswith("base URL: http://127.0.0.1:"), line + (proc.stderr.read() if proc.stderr else "")
        base = line.split()[2]
        assert "curl -s" in proc.stdout.readline()
        r = httpx.post(f"{base}/chat/completions", timeout=60, json={
            "model": "qwen2.5-coder-0.5b", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4})
        body = r.json()
        assert r.status_code == 200 and body["timings"]["predicted_n"] >= 1
        started = _llama_servers() - before
        assert len(started) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 15
    while _llama_servers() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _llama_servers() - before == set(), "no orphan llama-server"
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "partial" and receipt["kind"] == "serve"
    assert receipt["model"]["sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert len(receipt["engine"]["sha256"]) == 64 and receipt["engine"]["pin_match"] is True


def test_port_in_use_is_one_line_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = _cli("serve", "--port", str(port), "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"servepack: error: port {port} on 127.0.0.1 is already in use; pass another --port or omit it")


def test_missing_binary_is_one_line_exit_2(tmp_path: Path) -> None:
    done = _cli("serve", "--out", str(tmp_path / "o"), env={"SERVEPACK_LLAMA_SERVER": str(tmp_path / "nope")})
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("servepack: error: llama-server binary ") and "does not exist" in last
