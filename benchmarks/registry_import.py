"""`servepack registry import` and `registry choose` on generated records: import time for 1,000 and 10,000 records
(every file its own transaction, each checked by the registry's vendored schemas and rules), then `choose` latency
on the database that holds them. Targets (issue 24): 10,000 records in at most 10 s, choose in at most 200 ms.

The records are generated here from the fixture tree's shapes (tests/fixtures/registry/tree): per model, one model,
one model instance, recipes and their speed sweeps, a lab recipe; 100 models, so `choose` ranks tens of recipes.

    PYTHONPATH=src .venv/bin/python benchmarks/registry_import.py [--sizes 1000 10000] [--choose-runs 20]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from servepack.host.fingerprint import fingerprint
from servepack.registry.choose import EngineProbe, HostFacts, choose
from servepack.registry.db import RegistryDB
from servepack.registry.ingest import import_paths

TREE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "registry" / "tree"
MODELS = 100


def _load(rel: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads((TREE / rel).read_text())
    return doc


def generate(root: Path, n: int) -> int:
    """Write about `n` records under `root` in the registry's layout; the number written."""
    model = _load("model/wren-7b.json")
    instance = _load("model-instance/acme-wren-7b-gguf--q4-k-m.json")
    recipe = _load("recipe/wren-7b-native.json")
    sweep = _load("speed-sweep/wren-7b-native-sweep.json")
    (lab_file,) = (TREE / "recipes").rglob("*.json")
    lab = json.loads(lab_file.read_text())
    for d in ("model", "model-instance", "recipe", "speed-sweep"):
        (root / d).mkdir(parents=True)
    per_model = max(1, (n // MODELS - 3) // 2)  # recipe + sweep pairs per model, beside 3 other records
    extra = max(0, n - MODELS * (3 + 2 * per_model)) // 2  # the pairs that make up `n`, spread over the models
    written = 0
    for m in range(MODELS):
        mid, iid = f"gen-{m}-7b", f"acme-gen-{m}-7b-gguf--q4-k-m"
        files = {f"model/{mid}.json": {**model, "id": mid, "name": f"Gen-{m}-7B"},
                 f"model-instance/{iid}.json": {**instance, "id": iid, "model_id": mid, "served_name": f"gen-{m}-q4"}}
        card = f"ferro-gpu-{m}gb"
        (root / "recipes" / card).mkdir(parents=True)
        files[f"recipes/{card}/{mid}.{lab_file.stem.split('.', 1)[1]}.json"] = {**lab, "model": mid, "card": card}
        for k in range(per_model + (1 if m < extra % MODELS else 0) + extra // MODELS):
            rid = f"{mid}-r{k}"
            r = copy.deepcopy(recipe)
            r.update(id=rid, model_instance_id=iid, speed_sweep_ids=[f"{rid}-sweep"])
            s = copy.deepcopy(sweep)
            s.update(id=f"{rid}-sweep", recipe_id=rid)
            for row in s["rows"]:  # type: ignore[union-attr]
                row["decode_tok_s"] = row["decode_tok_s_per_stream"] = 10.0 + (k * 7 + m) % 90
            files[f"recipe/{rid}.json"] = r
            files[f"speed-sweep/{rid}-sweep.json"] = s
        for rel, doc in files.items():
            (root / rel).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        written += len(files)
    return written


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--choose-runs", type=int, default=20)
    a = ap.parse_args()
    fp = fingerprint()
    host = HostFacts(hardware_id="ferro-gpu-0gb", label=fp.label(), ram_total_bytes=fp.ram_total_bytes,
                     ram_available_bytes=fp.ram_total_bytes // 2, gpu_memory_bytes=None,
                     cache_dir=Path(tempfile.mkdtemp()), hf_cache=None,
                     probe=lambda name: EngineProbe(name, Path("/usr/bin/true"), "version: 1 (abc1234)"))
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    print(f"{'records':>8} {'import s':>9} {'records/s':>10} {'choose ms (median, max)':>24} {'candidates':>10}")
    ok = True
    for n in a.sizes:
        with tempfile.TemporaryDirectory(prefix="sp-regbench-") as tmp:
            root = Path(tmp) / "tree"
            count = generate(root, n)
            db_path = Path(tmp) / "r.sqlite3"
            with RegistryDB.open(db_path, create=True) as db:
                t0 = time.perf_counter()
                summary = import_paths(db, [root])
                took = time.perf_counter() - t0
                assert summary.refused == 0 and summary.count("imported") == count, summary.line()
                times = []
                for i in range(a.choose_runs):
                    t1 = time.perf_counter()
                    got = choose(db, f"gen-{i % MODELS}-7b", host)
                    times.append((time.perf_counter() - t1) * 1000)
            med, worst = statistics.median(times), max(times)
            print(f"{count:>8,} {took:>9.2f} {count / took:>10,.0f} {med:>15.1f}, {worst:6.1f} "
                  f"{len(got.candidates):>10}")
            if count >= 10000:
                ok = ok and took <= 10.0 and med <= 200.0
    print("targets (10,000 records <= 10 s, choose <= 200 ms):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
