"""Load generator ceiling: the highest open-loop request rate and the most concurrent closed-loop streams the
generator holds with launch lag p99 ≤ 10 ms, and the client CPU-seconds it spends per 1,000 requests.

The server is the repo's fake (`servepack.testing`) in a process of its own, answering instantly (no time to the
first token, no time between tokens) for the rate ladder; for the stream ladder it answers its first token at
once and then paces 8 tokens 0.5 s apart, so every stream holds its request open ~3.5 s and N streams really are
N concurrent requests (an instant answer would make a closed loop a CPU-saturation test, not a stream count).

Launch lag is measured from the per-request records, the same way for any version of the generator:
- open loop: the request's wire send − its planned arrival (from the point's start);
- closed loop: a stream's next wire send − the end of its previous response (its first request is left out here
  and reported as the spread of the streams' first sends).

A level "holds" when its lag p99 ≤ 10 ms, nothing was dropped, every request succeeded, and (open loop) the
achieved rate is within 2% of the requested. Run it on a quiet host:

    flock -x -w 900 /tmp/sp-timing.lock sh -c 'uptime; PYTHONPATH=src .venv/bin/python benchmarks/loadgen.py; uptime'
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from servepack.bench.load import LoadRunner, LoadSettings, PointRun
from servepack.bench.prompts import EstimateTokenizer
from servepack.bench.stats import quantile
from servepack.engine.attach import attach
from servepack.engine.base import Endpoint, EngineProcess
from servepack.testing.processes import fake_server_process

BOUND_MS = 10.0
RATES = (50.0, 100.0, 200.0, 300.0, 400.0, 600.0, 800.0, 1200.0)
STREAMS = (64, 128, 256, 512, 768, 1024)
L = TypeVar("L", int, float)  # a ladder's level: requests/s or streams


def _q(values: Sequence[float], q: float) -> float | None:
    return quantile(sorted(values), q) if values else None


def _fmt(v: float | None, nd: int = 1) -> str:
    return "—" if v is None else f"{v:,.{nd}f}"


def open_lags(run: PointRun) -> list[float]:
    out = []
    for s in run.samples:
        lag = getattr(s, "launch_lag_ms", None)
        if lag is None:
            lag = s.lateness_ms
        if lag is not None and not s.dropped:
            out.append(float(lag))
    return out


def closed_lags(run: PointRun) -> tuple[list[float], float]:
    """Turnaround lags (next send − previous end, per stream) and the spread of the streams' first sends (ms)."""
    by: dict[int, list[Any]] = defaultdict(list)
    for s in run.samples:
        if not s.dropped:
            by[s.stream].append(s)
    lags, firsts = [], []
    for items in by.values():
        items.sort(key=lambda s: s.t_sent_unix)
        firsts.append(items[0].t_sent_unix)
        for prev, cur in itertools.pairwise(items):
            end = prev.t_sent_unix + (prev.e2e_ms or 0.0) / 1000
            lags.append((cur.t_sent_unix - end) * 1000)
    spread = (max(firsts) - min(firsts)) * 1000 if firsts else 0.0
    return lags, spread


def peak_concurrency(run: PointRun) -> int:
    """Most requests open at once, from the records' send and end times (with client workers, a record's own
    `in_flight` counts only its worker's)."""
    edges = []
    for s in run.samples:
        if not s.dropped:
            edges += [(s.t_sent_unix, 1), (s.t_sent_unix + (s.e2e_ms or 0.0) / 1000, -1)]
    peak = cur = 0
    for _, d in sorted(edges):
        cur += d
        peak = max(peak, cur)
    return peak


def _endpoint(url: str, pid: int) -> Endpoint:
    att = attach(url, "scripted")
    return Endpoint(base_url=att.base_url, model="scripted", launched=False, processes=[
        EngineProcess(role="server", host="127.0.0.1", argv=[], binary_sha256=None, pid=pid)])


def ladder(levels: Sequence[L], *, itl_s: float, parallel: int, settings: Callable[[L], LoadSettings],
           row: Callable[[L, PointRun, int, float, float], tuple[bool, str]]) -> tuple[L | None, float | None]:
    """Each level in turn against the fake server (first token at once, `itl_s` between tokens, `parallel` slots),
    one row a level, until one does not hold: the highest level held and its client CPU-s per 1,000 requests.
    `row(level, run, ok, client CPU-s, CPU-s per 1k)` says whether the level held and its figures."""
    best: L | None = None
    best_cpu: float | None = None
    with fake_server_process(0.0, itl_s, quiet=True, args=["--parallel", str(parallel)]) as (url, proc):
        endpoint = _endpoint(url, proc.pid)
        for i, level in enumerate(levels):
            runner = LoadRunner(endpoint, settings(level), EstimateTokenizer(), llama=True, server_pids=[proc.pid])
            run = runner.run_point(i, level)
            ok = sum(1 for s in run.samples if s.ok)
            cpu = run.cost.client_cpu_s
            per_k = cpu / max(ok, 1) * 1000
            holds, figures = row(level, run, ok, cpu, per_k)
            print(f"{figures}  {'yes' if holds else 'NO'}", flush=True)
            if not holds:
                break
            best, best_cpu = level, per_k
    return best, best_cpu


def rate_ladder(duration_s: float, rates: Sequence[float], workers: int = 1) -> tuple[float | None, float | None]:
    print(f"\nopen loop, constant arrivals, {duration_s:g} s a point, {workers} client process(es); fake server "
          "answers instantly (4 tokens)")
    print(f"{'req/s':>7} {'achieved':>9} {'ok/n':>11} {'drop':>5} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} "
          f"{'client CPU-s':>12} {'CPU-s/1k req':>12}  holds")

    def settings(rate: float) -> LoadSettings:
        return LoadSettings(shape="open", arrivals="constant", prompt_tokens=32, gen_tokens=4, duration_s=duration_s,
                            max_requests=int(rate * duration_s) + 1, timeout_s=30, workers=workers)

    def row(rate: float, run: PointRun, ok: int, cpu: float, per_k: float) -> tuple[bool, str]:
        lags = open_lags(run)
        dropped = sum(1 for s in run.samples if s.dropped)
        p99 = _q(lags, 0.99)
        achieved = run.rate_achieved
        holds = (p99 is not None and p99 <= BOUND_MS and dropped == 0 and ok == len(run.samples)
                 and achieved is not None and achieved >= 0.98 * rate)
        return holds, (f"{rate:>7g} {_fmt(achieved):>9} {ok:>5}/{len(run.samples):<5} {dropped:>5} "
                       f"{_fmt(_q(lags, 0.5)):>8} {_fmt(p99):>8} {_fmt(max(lags) if lags else None):>8} {cpu:>12.2f} "
                       f"{per_k:>12.2f}")

    return ladder(rates, itl_s=0.0, parallel=1024, settings=settings, row=row)


def stream_ladder(duration_s: float, streams: Sequence[int], workers: int = 1) -> tuple[int | None, float | None]:
    print(f"\nclosed loop, {duration_s:g} s a point, {workers} client process(es); fake server: first token at "
          "once, 8 tokens 0.5 s apart (~3.5 s a request)")
    print(f"{'streams':>7} {'ok/n':>11} {'in flight':>9} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} "
          f"{'1st spread':>10} {'client CPU-s':>12} {'CPU-s/1k req':>12}  holds")

    def settings(n: int) -> LoadSettings:
        return LoadSettings(shape="closed", prompt_tokens=32, gen_tokens=8, duration_s=duration_s,
                            max_requests=min(100_000, n * 4), timeout_s=60, workers=workers)

    def row(n: int, run: PointRun, ok: int, cpu: float, per_k: float) -> tuple[bool, str]:
        lags, spread = closed_lags(run)
        p99 = _q(lags, 0.99)
        peak = peak_concurrency(run)
        holds = p99 is not None and p99 <= BOUND_MS and ok == len(run.samples) and peak >= n
        return holds, (f"{n:>7} {ok:>5}/{len(run.samples):<5} {peak:>9} {_fmt(_q(lags, 0.5)):>8} {_fmt(p99):>8} "
                       f"{_fmt(max(lags) if lags else None):>8} {spread:>10.0f} {cpu:>12.2f} {per_k:>12.2f}")

    return ladder(streams, itl_s=0.5, parallel=2048, settings=settings, row=row)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-duration", type=float, default=3.0, help="seconds a rate point")
    ap.add_argument("--stream-duration", type=float, default=8.0, help="seconds a stream point")
    ap.add_argument("--rates", type=float, nargs="*", default=list(RATES))
    ap.add_argument("--streams", type=int, nargs="*", default=list(STREAMS))
    ap.add_argument("--workers", type=int, default=1, help="client processes (LoadSettings.workers)")
    a = ap.parse_args()
    print(f"load generator ceiling on {os.cpu_count()} cores; a level holds with launch lag p99 ≤ {BOUND_MS:g} ms, "
          "nothing dropped or failed (open loop: achieved ≥ 98% of the rate)")
    rate, rate_cpu = rate_ladder(a.rate_duration, a.rates, a.workers) if a.rates else (None, None)
    streams, stream_cpu = stream_ladder(a.stream_duration, a.streams, a.workers) if a.streams else (None, None)
    print()
    print(f"highest open-loop rate held: {_fmt(rate, 0)} req/s (target ≥ 200); client CPU {_fmt(rate_cpu, 2)} "
          "CPU-s per 1,000 requests there")
    print(f"most concurrent streams held: {streams if streams is not None else '—'} (target ≥ 512); client CPU "
          f"{_fmt(stream_cpu, 2)} CPU-s per 1,000 requests there")
    good = (rate or 0) >= 200 and (streams or 0) >= 512
    print("PASS (≥ 200 req/s and ≥ 512 streams)" if good else "BELOW TARGET (see figures)")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
