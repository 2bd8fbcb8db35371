"""Observer cost of `servepack capacity`: CPU-seconds servepack spends per 1,000 requests and per 100k output
tokens at 1, 8 and 64 closed-loop streams, against the scripted fake server in a process of its own (so the two
CPU figures are apart); the server's CPU-seconds and the ratio are printed beside them.

    PYTHONPATH=src .venv/bin/python benchmarks/capacity_observer.py [--requests N] [--gen-tokens N]
"""

from __future__ import annotations

import argparse
import os
import sys

import httpx

from servepack.bench.load import LoadRunner, LoadSettings
from servepack.bench.prompts import ServerTokenizer
from servepack.engine.attach import attach
from servepack.engine.base import Endpoint, EngineProcess
from servepack.testing.processes import fake_server_process

STREAMS = (1, 8, 64)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=512, help="requests per level")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    a = ap.parse_args()
    print(f"closed loop, {a.requests} requests a level, prompt {a.prompt_tokens} + gen {a.gen_tokens} tokens; "
          f"{os.cpu_count()} cores; the fake server runs 64 slots at 2 ms a token")
    print(f"{'streams':>7} {'req':>5} {'tokens':>8} {'wall s':>7} {'client CPU-s':>12} {'server CPU-s':>12} "
          f"{'ratio':>6} {'CPU-s/1k req':>12} {'CPU-s/100k tok':>14}")
    with fake_server_process(0.02, 0.002, quiet=True, args=["--parallel", "64", "--queue"]) as (url, proc):
        att = attach(url, "scripted")
        endpoint = Endpoint(base_url=att.base_url, model="scripted", launched=False, processes=[
            EngineProcess(role="server", host="127.0.0.1", argv=[], binary_sha256=None, pid=proc.pid)])
        with httpx.Client(timeout=30) as sync:
            tok = ServerTokenizer(sync, att.base_url, "chat")
            for i, n in enumerate(STREAMS):
                settings = LoadSettings(prompt_tokens=a.prompt_tokens, gen_tokens=a.gen_tokens,
                                        max_requests=a.requests, duration_s=600, timeout_s=120)
                runner = LoadRunner(endpoint, settings, tok, llama=True, server_pids=[proc.pid])
                run = runner.run_point(i, n)
                ok = [s for s in run.samples if s.ok]
                tokens = sum(s.generated_tokens or 0 for s in ok)
                c = run.cost
                per_k = c.client_cpu_s / max(len(ok), 1) * 1000
                per_100k = c.client_cpu_s / max(tokens, 1) * 100_000
                ratio = f"{c.ratio:.3f}" if c.ratio is not None else "—"
                server = f"{c.server_cpu_s:.2f}" if c.server_cpu_s is not None else "—"
                print(f"{n:>7} {len(ok):>5} {tokens:>8,} {run.wall_s:>7.2f} {c.client_cpu_s:>12.2f} {server:>12} "
                      f"{ratio:>6} {per_k:>12.2f} {per_100k:>14.2f}")
    print("client CPU-s: time.process_time() of this process over each point's timed window (request sending, "
          "stream reading); prompts are built before it and records derived after it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
