"""The memory sampler's achieved rate against its nominal one (10 Hz), and the gaps between its samples.

A test asserts only behaviour (it keeps sampling, never faster than its grid); how close to 10 Hz it stays is a
property of the host, measured here. Run it on a quiet host and quote the load it prints.

    .venv/bin/python benchmarks/memory_sampler.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from servepack.host.memory import MemorySampler
from servepack.store import ResultsDir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        writer = ResultsDir(Path(tmp) / "r").jsonl("memory.jsonl")
        with MemorySampler(os.getpid(), writer) as sampler:
            time.sleep(args.seconds)
        summary = sampler.summary()
        t = [json.loads(ln)["t_s"] for ln in (Path(tmp) / "r" / "memory.jsonl").read_text().splitlines()]
    gaps = [b - a for a, b in itertools.pairwise(t)]
    rate = summary.samples / summary.duration_s
    print(f"nominal {1 / summary.interval_s:.1f} Hz; achieved {rate:.2f} Hz ({summary.samples} samples in "
          f"{summary.duration_s:.2f} s)")
    if gaps:
        print(f"gap between samples: median {statistics.median(gaps) * 1000:.1f} ms, max {max(gaps) * 1000:.1f} ms")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
