"""Client ceiling: 64 concurrent streams, the aggregate tok/s the client sustains, and its timing skew
against what the scripted server (a separate process) says it sent. Goal: ≥ 20,000 tok/s, skew ≤ 1%.

"Sustained" counts the chunks that arrive while all 64 streams are generating (the overlap window), so the
staggered start of 64 requests on a 2-core host does not dilute it; the round-wide aggregate is printed too.

    .venv/bin/python benchmarks/client_ceiling.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.engine.attach import attach
from servepack.store import ResultsDir
from servepack.testing.processes import fake_server_process

STREAMS, ITL_S, GEN = 64, 0.003, 1000


def main() -> int:
    print(f"{STREAMS} streams × {GEN} tokens, scheduled {1 / ITL_S:.0f} tok/s each "
          f"({STREAMS / ITL_S:,.0f} aggregate); {os.cpu_count()} cores")
    with fake_server_process(0.05, ITL_S) as (url, _), tempfile.TemporaryDirectory() as tmp:
        results = ResultsDir(Path(tmp) / "r")
        settings = BenchSettings(context_marks=(32,), gen_tokens=GEN, samples=1, concurrency=(STREAMS,),
                                 timeout_s=120)
        cell = run_bench(attach(url, "scripted"), settings, results).cells[0]
        lines = [json.loads(ln) for ln in results.file("requests.jsonl").read_text().splitlines()]
    arrivals = [[ln["t_sent_unix"] + t / 1000 for t in ln["chunk_ms"]] for ln in lines if ln["ok"]]
    lo, hi = max(a[0] for a in arrivals), min(a[-1] for a in arrivals)
    inside = sum(1 for a in arrivals for t in a if lo <= t <= hi)
    sustained = inside / (hi - lo) if hi > lo else 0.0
    gap = cell.decode_gap_pct
    worst = max(abs(gap.min or 0), abs(gap.max or 0))
    print(f"ok {cell.n_ok}/{cell.n}; sustained while all {STREAMS} stream: {sustained:,.0f} tok/s over "
          f"{hi - lo:.2f} s; round-wide aggregate {cell.decode_tok_s_aggregate.median or 0:,.0f} tok/s")
    print(f"per-stream decode: client {cell.decode_tok_s_client.median:,.1f} vs server "
          f"{cell.decode_tok_s_server.median:,.1f} tok/s; skew |client − server| / server median "
          f"{abs(gap.median or 0):.2f}%, worst {worst:.2f}%; client queue before the wire (max) "
          f"{max(ln['client_queue_ms'] for ln in lines):.0f} ms")
    good = sustained >= 20_000 and abs(gap.median or 0) <= 1.0
    print("PASS (≥ 20,000 tok/s sustained, median skew ≤ 1%)" if good else "BELOW GOAL (see figures)")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
