"""Observer cost of `servepack capacity`: servepack's CPU-seconds against the server's over closed-loop points run
as a sweep runs them, against the scripted fake server in a process of its own (so the two CPU figures are apart).

Beside each point run the sweep's watchers: the point watch (`PointWatch`, one reading a second: NVML where there
is a GPU, /proc/stat, the server's threads) and the memory sampler (ten a second). The point watch follows the fake
server and a stand-in process with `--server-threads` threads, as many as a CUDA llama-server has (139 for the 32B
twin on the H100, 267 for the 0.5B), so its thread reading costs what it costs there.

Each point's servepack CPU (`client CPU-s`, what the point records: `time.process_time()` over its timed window)
is split into the per-second cost of the watchers (each watcher thread's own CPU clock over the point, per second)
and the per-request cost of the rest (the requests: sending, reading the stream, timestamps), per request and per
1,000 output tokens. `ratio` is servepack ÷ the fake server, which is itself Python and so costs more per token than
llama-server: judge the watchers' CPU-s a second against the ~1.1 cores a CUDA llama-server used on the H100.

Cases: the fast server (2 ms a token: per-request cost dominates) at 16 and 64 streams, and a slow one (60 ms a
token, like the 32B twin's ~16 tok/s a stream: the watchers' share is largest) at 16 and 64 streams.

    PYTHONPATH=src .venv/bin/python benchmarks/capacity_observer.py [--requests N] [--gen-tokens N] [--server-threads N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

import httpx

from servepack.bench.load import LoadRunner, LoadSettings
from servepack.bench.observer import PointWatch
from servepack.bench.prompts import ServerTokenizer
from servepack.engine.attach import attach
from servepack.engine.base import Endpoint, EngineProcess
from servepack.host.memory import MemorySampler
from servepack.testing.processes import fake_server_process

# (name, seconds a token, streams, share of --requests): the slow case sends fewer requests, each lasting longer
CASES = (("fast", 0.002, 16, 1.0), ("fast", 0.002, 64, 1.0), ("slow", 0.06, 16, 0.25), ("slow", 0.06, 64, 0.5))
WATCHERS = ("servepack-point-watch", "servepack-memory")


def _thread_cpu() -> dict[str, float]:
    """CPU-seconds of each watcher thread of this process so far (its own clock)."""
    out = {}
    for t in threading.enumerate():
        if t.name in WATCHERS and t.ident is not None:
            try:
                out[t.name] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (OSError, ProcessLookupError):
                continue
    return out


def _stand_in(threads: int) -> subprocess.Popen[bytes]:
    """A process with `threads` idle threads: the server's thread count for the point watch to read."""
    code = (f"import threading, time\n[threading.Thread(target=time.sleep, args=(3600,), daemon=True).start() "
            f"for _ in range({threads - 1})]\ntime.sleep(3600)")
    return subprocess.Popen([sys.executable, "-c", code])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=512, help="requests per fast point (a slow one sends fewer)")
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--server-threads", type=int, default=139, help="threads of the stand-in the watch reads")
    a = ap.parse_args()
    if a.requests < 16 or a.gen_tokens < 1 or a.server_threads < 1:
        print("capacity_observer: --requests must be at least 16, --gen-tokens and --server-threads at least 1",
              file=sys.stderr)
        return 2
    print(f"closed loop, prompt {a.prompt_tokens} + gen {a.gen_tokens} tokens; {os.cpu_count()} cores; the point "
          f"watch (1 s) reads the fake server and a stand-in of {a.server_threads} threads; the memory sampler "
          f"at 0.1 s")
    print(f"{'case':>4} {'ms/tok':>6} {'streams':>7} {'req':>5} {'tokens':>7} {'wall s':>6} {'client CPU-s':>12} "
          f"{'server CPU-s':>12} {'ratio':>6} {'watch ms/s':>10} {'memory ms/s':>11} {'req ms/req':>10} "
          f"{'req ms/1k tok':>13}")
    stand_in = _stand_in(a.server_threads)
    try:
        for name, itl, streams, share in CASES:
            with fake_server_process(0.05, itl, quiet=True, args=["--parallel", "64", "--queue"]) as (url, proc):
                att = attach(url, "scripted")
                endpoint = Endpoint(base_url=att.base_url, model="scripted", launched=False, processes=[
                    EngineProcess(role="server", host="127.0.0.1", argv=[], binary_sha256=None, pid=proc.pid)])
                with httpx.Client(timeout=30) as sync, MemorySampler(None), \
                        PointWatch([proc.pid, stand_in.pid]) as watch:
                    tok = ServerTokenizer(sync, att.base_url, "chat")
                    settings = LoadSettings(prompt_tokens=a.prompt_tokens, gen_tokens=a.gen_tokens,
                                            max_requests=max(streams, int(a.requests * share)), duration_s=600,
                                            timeout_s=120)
                    runner = LoadRunner(endpoint, settings, tok, llama=True, server_pids=[proc.pid])
                    watch.tick()  # as the sweep does, just before the point
                    cpu0, w0 = _thread_cpu(), time.perf_counter()
                    run = runner.run_point(0, streams)
                    cpu1, wall = _thread_cpu(), time.perf_counter() - w0
            ok = [s for s in run.samples if s.ok]
            tokens = sum(s.generated_tokens or 0 for s in ok)
            c = run.cost
            rate = {w: (cpu1.get(w, 0.0) - cpu0.get(w, 0.0)) / wall for w in WATCHERS}  # CPU-s a second
            requests_cpu = max(c.client_cpu_s - sum(rate.values()) * c.wall_s, 0.0)
            ratio = f"{c.ratio:.3f}" if c.ratio is not None else "—"
            server = f"{c.server_cpu_s:.2f}" if c.server_cpu_s is not None else "—"
            print(f"{name:>4} {itl * 1000:>6g} {streams:>7} {len(ok):>5} {tokens:>7,} {c.wall_s:>6.1f} "
                  f"{c.client_cpu_s:>12.3f} {server:>12} {ratio:>6} {rate[WATCHERS[0]] * 1000:>10.2f} "
                  f"{rate[WATCHERS[1]] * 1000:>11.2f} {requests_cpu / max(len(ok), 1) * 1000:>10.3f} "
                  f"{requests_cpu / max(tokens, 1) * 1e6:>13.1f}")
    finally:
        stand_in.kill()
        stand_in.wait()
    print("client CPU-s: time.process_time() of this process over each point's timed window (every thread); watch "
          "and memory ms/s: those threads' own CPU clocks over the whole point, per second (the per-time cost); "
          "req: the client CPU-s less the watchers' share of the window (the per-request cost); prompts are built "
          "before the window and records derived after it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
