"""Client ceiling: 64 concurrent streams, aggregate tok/s the client sustains, and its timing skew against
what the scripted server (a separate process) says it sent. Goal: ≥ 20,000 tok/s with skew ≤ 1%.

    .venv/bin/python benchmarks/client_ceiling.py
"""

from __future__ import annotations

import os
import sys

from _harness import scripted_process

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench

STREAMS, ITL_S, GEN = 64, 0.003, 1000


def main() -> int:
    print(f"{STREAMS} streams × {GEN} tokens, scheduled {1 / ITL_S:.0f} tok/s each "
          f"({STREAMS / ITL_S:,.0f} aggregate); {os.cpu_count()} cores")
    with scripted_process(0.05, ITL_S) as url:
        settings = BenchSettings(context_marks=(32,), gen_tokens=GEN, samples=1, concurrency=(STREAMS,),
                                 timeout_s=120)
        summary = run_bench(url, "scripted", settings, None)
    cell = summary.cells[0]
    agg = cell.decode_tok_s_aggregate.median or 0.0
    gaps = [abs(g) for g in [cell.decode_gap_pct.median, cell.decode_gap_pct.min, cell.decode_gap_pct.max]
            if g is not None]
    skew = max(gaps) if gaps else float("nan")
    print(f"ok {cell.n_ok}/{cell.n}; aggregate decode (client) {agg:,.0f} tok/s; per-stream client "
          f"{cell.decode_tok_s_client.median:,.1f} vs server {cell.decode_tok_s_server.median:,.1f} tok/s")
    print(f"timing skew |client − server| / server: median {abs(cell.decode_gap_pct.median or 0):.2f}%, "
          f"worst {skew:.2f}%; TTFT median {cell.ttft_ms.median:.1f} ms")
    good = agg >= 20_000 and skew <= 1.0
    print("PASS" if good else "BELOW GOAL (see figures)")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
