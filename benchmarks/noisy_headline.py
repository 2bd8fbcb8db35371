"""Samples to a claim-grade headline, on a quiet host and beside a CPU hog that comes and goes.

The real llama-server with the embedded model (the shipped pack qwen2.5-coder-0.5b-cpu, `make run`'s), benched at
its headline cell only (1,024-token prompt, 128 generated, concurrency 1) with the pack's plan: 3 clean samples at
least, more until the 95% interval of decode tok/s (server) is within the pack's ±3%, contended and stalled samples
set aside and replaced (at most 3× the planned count, 150 s a cell). The hog is a busy loop outside servepack's
process tree: on for `--on` seconds, off for `--off` (default 12 on, 28 off: busy 30% of the time, in spells longer
than one sample, as a VM's steal or a neighbour's job comes and goes).

    flock -x -w 900 /tmp/sp-timing.lock sh -c \
        'uptime; PYTHONPATH=src .venv/bin/python benchmarks/noisy_headline.py; uptime'

Prints, per condition: samples taken, clean, set aside (and why), whether the headline is claim-grade, its median
and interval, and the wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from servepack.packs import load_pack
from servepack.pipeline.bench import bench_pack
from servepack.records.policy import cell_quality
from servepack.testing.processes import start_detached_hog


@contextlib.contextmanager
def hog_comes_and_goes(on_s: float, off_s: float) -> Iterator[list[int]]:
    """A busy loop `on_s` seconds every `on_s + off_s`, off first; every loop it started is killed on exit."""
    stop = threading.Event()
    pids: list[int] = []

    def cycle() -> None:
        while not stop.wait(off_s):
            pids.append(start_detached_hog(on_s, 1.0))
            stop.wait(on_s)

    t = threading.Thread(target=cycle, daemon=True)
    t.start()
    try:
        yield pids
    finally:
        stop.set()
        t.join()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def one(label: str, out: Path, hog: bool, on_s: float, off_s: float) -> None:
    pack = load_pack(None).pack
    h = pack.claims.headline
    t0 = time.monotonic()
    ctx = hog_comes_and_goes(on_s, off_s) if hog else contextlib.nullcontext([])
    with ctx as pids:
        summary, _ = bench_pack(None, None, out=out / label, progress=lambda _: None,
                                   context_marks=(h.context_tokens,), gen_tokens=h.gen_tokens, concurrency=(1,))
    wall = time.monotonic() - t0
    (cell,) = summary.cells
    problems = cell_quality(cell, pack.claims)
    st = cell.decode_tok_s_server
    median = "—" if st.median is None else f"{st.median:.2f}"
    print(f"{label:>9} | samples {cell.n:>2} | clean {cell.n_clean:>2} | set aside {cell.n_set_aside or 0:>2}"
          f"{' (' + '; '.join(cell.set_aside_why) + ')' if cell.set_aside_why else ''} | "
          f"{'CLAIM-GRADE' if problems == [] else 'not claim-grade: ' + '; '.join(problems or ['?'])} | "
          f"decode {median} tok/s, {st.interval_text()} | stopped: "
          f"{cell.interval.stopped_by if cell.interval else '?'} | {wall:.0f} s (bench {summary.wall_s:.0f} s)"
          + (f" | hog started {len(pids)}×" if hog else ""))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--on", type=float, default=12.0, help="hog seconds on")
    ap.add_argument("--off", type=float, default=28.0, help="hog seconds off")
    ap.add_argument("--only", choices=["quiet", "hog"], default=None)
    a = ap.parse_args()
    print(f"{os.cpu_count()} cores; real llama-server, embedded pack, headline cell 1,024 prompt × 128 gen; "
          f"hog {a.on:g} s on / {a.off:g} s off")
    with tempfile.TemporaryDirectory(prefix="noisy-headline-") as d:
        for label, hog in (("quiet", False), ("hog", True)):
            if a.only in (None, label):
                one(label, Path(d), hog, a.on, a.off)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
