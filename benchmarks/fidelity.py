"""Client fidelity: against a scripted server (its own process) with a known TTFT and token schedule, the
client's median TTFT and decode tok/s must be within 1% of the truth at concurrency 1, 8 and 64.

Truth is the schedule; the server's own record of when it actually sent (its `timings`) is printed too, so
a host too loaded to keep the schedule is told apart from a client that mismeasures.

    .venv/bin/python benchmarks/fidelity.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.bench.stats import median
from servepack.engine.attach import attach
from servepack.store import ResultsDir
from servepack.testing.processes import fake_server_process

TTFT_S, ITL_S, GEN = 0.25, 0.02, 64
PLAN = {1: 7, 8: 2, 64: 1}  # concurrency → rounds


def _pct(x: float, truth: float) -> float:
    return (x - truth) / truth * 100


def main() -> int:
    ok = True
    truth_ttft, truth_decode = TTFT_S * 1000, 1 / ITL_S
    print(f"truth: TTFT {truth_ttft:.1f} ms, decode {truth_decode:.2f} tok/s ({GEN} tokens per request)")
    with fake_server_process(TTFT_S, ITL_S) as (url, _), tempfile.TemporaryDirectory() as tmp:
        for conc, rounds in PLAN.items():
            results = ResultsDir(Path(tmp) / f"c{conc}")
            settings = BenchSettings(context_marks=(64,), gen_tokens=GEN, samples=rounds, concurrency=(conc,),
                                     timeout_s=60)
            cell = run_bench(attach(url, "scripted"), settings, results).cells[0]
            lines = [json.loads(ln) for ln in results.file("requests.jsonl").read_text().splitlines()]
            server_ttft = median([ln["timings"]["prompt_ms"] for ln in lines if ln["timings"]])
            queue = median([ln["client_queue_ms"] for ln in lines])
            ttft, dec = cell.ttft_ms.median or 0.0, cell.decode_tok_s_client.median or 0.0
            srv_dec = cell.decode_tok_s_server.median or 0.0
            good = abs(_pct(ttft, truth_ttft)) <= 1 and abs(_pct(dec, truth_decode)) <= 1
            ok &= good
            print(f"concurrency {conc:>2} (n={cell.n}): client TTFT {ttft:.2f} ms ({_pct(ttft, truth_ttft):+.2f}%), "
                  f"decode {dec:.3f} tok/s ({_pct(dec, truth_decode):+.2f}%) → {'within' if good else 'OUTSIDE'} 1%")
            print(f"    server's own record: TTFT {server_ttft:.2f} ms, decode {srv_dec:.3f} tok/s; "
                  f"client queue before the wire {queue:.2f} ms; ITL p90 {cell.itl_ms.p90 or 0:.2f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
