"""Start the scripted server in its own process (so it never shares the client's GIL) for the benchmarks."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx


@contextlib.contextmanager
def scripted_process(ttft_s: float, itl_s: float) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "servepack.testing.fake_server", "--port", str(port),
                             "--ttft", str(ttft_s), "--itl", str(itl_s)], env={**os.environ, "FAKE_MODE": "healthy"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("scripted server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
