"""The contention guard, measured: bench the embedded pack on a quiet host, then with a CPU hog of known share
started beside it; print both figures and whether the guard flagged each run.

Target: every contended run flagged, no quiet run flagged. A "quiet" run is only quiet if the host is: the load
average before each run is printed, and a quiet run on a loaded host that the guard flags is the guard being
right, not wrong (the summary says so).

    .venv/bin/python benchmarks/contention_guard.py                 # embedded pack, 2 quiet + 2 hog runs
    .venv/bin/python benchmarks/contention_guard.py --quick         # one 256-token cell, 5 samples
    .venv/bin/python benchmarks/contention_guard.py --engine fake   # the fake server: the guard only, in seconds
    .venv/bin/python benchmarks/contention_guard.py --hog-cores 0.5 --runs 3

The hog is a bounded busy loop (`--hog-cores 1.5` = one full loop and one at 50% duty), started outside this
process's tree as another user's job would be, and killed by pid at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servepack.bench.summary import BenchSummary, Cell
from servepack.packs import load_pack
from servepack.pipeline.bench import bench_attach, bench_pack
from servepack.records.policy import noisy_reason
from servepack.testing.processes import cpu_hog, fake_server_process


@dataclass
class Outcome:
    label: str
    hog: bool
    load_before: float
    figure: float | None
    interval: str
    contended: int
    samples: int
    noisy: str | None
    wall_s: float

    @property
    def flagged(self) -> bool:
        return self.contended > 0


def _headline_cell(summary: BenchSummary, context_tokens: int) -> Cell | None:
    cells = [c for c in summary.cells if c.concurrency == 1]
    return next((c for c in cells if c.context_tokens == context_tokens), cells[-1] if cells else None)


def _one(label: str, hog: bool, args: argparse.Namespace, url: str | None, out: Path) -> Outcome:
    pack = load_pack(None).pack
    overrides: dict[str, Any] = {}
    if args.quick:
        overrides = {"context_marks": (256,), "gen_tokens": 64, "samples": 5}
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    quiet_log: list[str] = []
    say = quiet_log.append if not args.verbose else print
    if url is not None:
        plan: dict[str, Any] = {"context_marks": (64,), "gen_tokens": 32, "samples": 5, **overrides}
        summary, _ = bench_attach(url, "scripted", pack_ref=None, out=out, progress=say, **plan)
    else:
        summary, _ = bench_pack(None, None, out=out, progress=say, **overrides)
    cell = _headline_cell(summary, pack.claims.headline.context_tokens)
    h = summary.host
    figure = cell.decode_tok_s_server.median if cell else None
    interval = (cell.interval.note.split("; stopped")[0] if cell and cell.interval else
                cell.decode_tok_s_server.interval_text() if cell else "no cell")
    return Outcome(label=label, hog=hog, load_before=load, figure=figure, interval=interval,
                   contended=h.samples_contended if h else 0, samples=h.samples if h else 0,
                   noisy=noisy_reason(summary, pack.claims), wall_s=time.monotonic() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2, help="runs of each kind (quiet, hog)")
    p.add_argument("--hog-cores", type=float, default=1.0, help="CPU the hog takes, in cores (e.g. 0.5, 1, 1.5)")
    p.add_argument("--engine", choices=["embedded", "fake"], default="embedded")
    p.add_argument("--quick", action="store_true", help="one 256-token cell × 64 tokens, 5 samples")
    p.add_argument("--verbose", action="store_true", help="print servepack's progress lines")
    args = p.parse_args()
    if args.runs < 1 or not 0 < args.hog_cores <= (os.cpu_count() or 1):
        p.error("--runs ≥ 1 and 0 < --hog-cores ≤ the number of cores")
    print(f"host: {os.cpu_count()} logical cores · load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} · "
          f"engine {args.engine} · hog {args.hog_cores:g} cores · {args.runs} runs of each kind")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        url = stack.enter_context(fake_server_process(0.05, 0.01))[0] if args.engine == "fake" else None
        for i in range(args.runs):
            for hog in (False, True):
                label = f"{'hog' if hog else 'quiet'}-{i + 1}"
                out = Path(tmp) / label
                if hog:
                    with cpu_hog(args.hog_cores, 1800):
                        o = _one(label, hog, args, url, out)
                else:
                    o = _one(label, hog, args, url, out)
                outcomes.append(o)
                fig = "—" if o.figure is None else f"{o.figure:.2f}"
                print(f"{label:>8}: load before {o.load_before:.2f} · decode {fig} tok/s (server median) · "
                      f"{o.interval} · {o.contended}/{o.samples} samples contended · "
                      f"{'FLAGGED' if o.flagged else 'not flagged'} · "
                      f"{'claim-grade' if o.noisy is None else 'not claim-grade'} · {o.wall_s:.0f} s")
                if o.noisy and args.verbose:
                    print(f"          {o.noisy}")
    hogs = [o for o in outcomes if o.hog]
    quiet = [o for o in outcomes if not o.hog]
    caught = sum(o.flagged for o in hogs)
    clean = sum(not o.flagged for o in quiet)
    print(f"contended runs flagged: {caught}/{len(hogs)} · quiet runs not flagged: {clean}/{len(quiet)} · "
          f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    loaded = [o for o in quiet if o.load_before >= 1.0]
    if loaded:
        print(f"note: {len(loaded)} 'quiet' run(s) started with load ≥ 1 — the host was not quiet, so a flag there "
              "is the guard seeing real contention")
    return 0 if caught == len(hogs) and clean == len(quiet) else 1


if __name__ == "__main__":
    sys.exit(main())
