"""Processes for tests and benchmarks: the fake server in a process of its own, and a CPU hog that is not ours."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import httpx

HOG_CODE = """
import sys, time
duty, end = float(sys.argv[1]), time.time() + float(sys.argv[2])
while time.time() < end:
    t = time.time()
    while time.time() - t < 0.1 * duty:
        pass
    if duty < 1:
        time.sleep(0.1 * (1 - duty))
"""


@contextlib.contextmanager
def fake_server_process(ttft_s: float = 0.05, itl_s: float = 0.01, *, quiet: bool = False,
                        args: Sequence[str] = ()) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`python -m servepack.testing.fake_server` on a free loopback port, healthy before it is yielded; the process
    is its own (it does not share the client's GIL, and it can be stopped with SIGSTOP like a real server).
    `args` are passed on (e.g. `--parallel 8 --queue` for scripted capacity)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen([sys.executable, "-m", "servepack.testing.fake_server", "--port", str(port),
                             "--ttft", str(ttft_s), "--itl", str(itl_s), *args],
                            env={**os.environ, "FAKE_MODE": "healthy"}, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the fake server did not start")
            time.sleep(0.05)
        yield url, proc
    finally:
        proc.send_signal(signal.SIGCONT)  # a stopped server must run to hear the SIGTERM
        proc.terminate()
        proc.wait(10)


def start_detached_hog(seconds: float, duty: float = 1.0) -> int:
    """One bounded busy loop at `duty` (0–1), reparented away from this process so it counts as another's job."""
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" {duty} {seconds} >/dev/null 2>&1 & echo $!',
                          HOG_CODE], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@contextlib.contextmanager
def cpu_hog(cores: float, seconds: float, *, settle_s: float = 0.5) -> Iterator[list[int]]:
    """Busy loops taking `cores` of CPU (1.5: one full loop and one at 50% duty), killed on exit."""
    duties = [1.0] * math.floor(cores) + ([cores - math.floor(cores)] if cores % 1 else [])
    pids = [start_detached_hog(seconds, d) for d in duties]
    time.sleep(settle_s)
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
