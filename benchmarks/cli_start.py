"""How fast the `servepack` command starts: `--version`, `--help`, a command's `--help`, and `registry list` on a
database of 10,000 records (issue 31: `--version` and `--help` ≤ 0.3 s, `registry list` on 10,000 records ≤ 0.5 s).

Each command runs as a user runs it (a new interpreter through the installed entry point, or `python -m
servepack.cli.main` with `--module`), `--runs` times after one warm-up (which writes the bytecode an installed
package has, even where the host sets PYTHONDONTWRITEBYTECODE); the median and the fastest are printed with
the machine's load before and after. The records come from `benchmarks/registry_import.generate` (the fixture tree's
shapes) and are imported once into a scratch database; the import, a write command, leaves in it what a user's
database holds after one: each source's answer to "may these bytes hold a secret" (`registry.db`'s `secret_words`),
which `registry list --json` reads instead of looking through every record's bytes again.

    PYTHONPATH=src .venv/bin/python benchmarks/cli_start.py [--records 10000] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from registry_import import generate

from servepack.registry.db import RegistryDB
from servepack.registry.ingest import import_paths


def _command(module: bool) -> list[str]:
    entry = shutil.which("servepack", path=str(Path(sys.executable).parent))
    if module or entry is None:
        return [sys.executable, "-m", "servepack.cli.main"]
    return [entry]


def _time(argv: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    subprocess.run(argv, capture_output=True, env=env, check=True, timeout=120)  # warm the page cache
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=True, timeout=120)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), min(walls)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--module", action="store_true", help="run `python -m servepack.cli.main`, not the entry point")
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    cmd = _command(args.module)
    # An installed package has its bytecode (pip compiles it); a host that sets PYTHONDONTWRITEBYTECODE would make
    # every run compile every module it imports, which no user's start pays: the warm-up run writes it here.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        root, db_path = Path(tmp) / "tree", Path(tmp) / "registry.sqlite"
        written = generate(root, args.records)
        with RegistryDB.open(db_path, create=True) as db:
            summary = import_paths(db, [root])
            assert summary.refused == 0, summary.line()
            held = db.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        print(f"database: {held} records held ({written} files written)")
        cases = [("--version", ["--version"]), ("--help", ["--help"]), ("bench --help", ["bench", "--help"]),
                 ("registry list", ["registry", "list", "--db", str(db_path)]),
                 ("registry list --json", ["registry", "list", "--db", str(db_path), "--json"])]
        for name, argv in cases:
            median, best = _time([*cmd, *argv], args.runs, env)
            print(f"{name:22s} median {median * 1000:7.0f} ms   fastest {best * 1000:7.0f} ms   ({args.runs} runs)")
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
