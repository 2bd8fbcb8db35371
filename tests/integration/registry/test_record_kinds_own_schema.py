"""Issue 33 item 3: each record kind is checked by the schema of its own folder and form, and the lab's `reported`
proofs import, marked reported and ranked below measured figures.

The wrong answers (before): a catalog entry of the registry's `registry/benchmark/` folder was checked with the
schema of benchmark *results* (rows of scores) and refused ('rows' is a required property); a lab recipe whose proof
is reported (a third party's launch and figures, no gate run: lab/import_reported.py) was refused for its gates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.registry.format.check import upstream_problems, upstream_schema, upstream_stem

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
CARD = "ferro-gpu-24gb"
# A catalog entry written from the registry's published schema (registry/schema/benchmark.schema.json at e88b860)
# and the form of its registry/benchmark/ files; the benchmark itself is fictitious.
CATALOG_ENTRY: dict[str, Any] = {
    "aliases": ["WrenEval", "wren-eval"], "category": "agentic",
    "command": "local-ai benchmark run wren-eval --model-instance <model-instance-id>",
    "coverage": {"benchmark_run_count": 0, "direct_run_count": 0, "inherited_run_count": 0, "model_count": 0,
                 "model_instance_count": 0},
    "description": "WrenEval is a fictitious agentic evaluation (fixture).", "id": "wren-eval",
    "link": "https://example.invalid/benchmarks/wren-eval.html",
    "metric": {"higher_is_better": True, "name": "reported_score", "unit": "points"}, "name": "WrenEval",
    "provenance": {"captured_at": "2026-09-01T10:00:00Z",
                   "sources": [{"captured_at": "2026-09-01T10:00:00Z", "kind": "benchmark-catalog",
                                "url": "https://example.invalid/catalog"}]},
    "runner": {"command_template": None, "framework": "reference-protocol",
               "implementation_url": "https://example.invalid/benchmarks/wren-eval.html", "status": "manual",
               "task": None},
    "schema_version": "local-ai-registry/v1",
}
REPORTED_PROOF = {"at": "2026-09-03", "on": "acme-lab", "src": "acme/wren-serving@0123456789ab", "gates": "",
                  "claims": "tools", "tps": 500.0, "prefill": 3000, "reported": True}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout + result.stderr


def _write(path: Path, doc: dict[str, Any], compact: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=2, sort_keys=True)
    path.write_text(text + "\n")
    return path


def test_a_benchmark_catalog_entry_is_checked_by_the_catalog_schema_and_imports(tmp_path: Path) -> None:
    assert upstream_stem("benchmark", CATALOG_ENTRY) == "benchmark-catalog"
    assert upstream_problems("benchmark", CATALOG_ENTRY) == []
    # the wrong answer: the results table's schema refuses the registry's own catalog entry
    results = upstream_schema("benchmark")
    assert results is not None and upstream_schema("benchmark", CATALOG_ENTRY) != results
    assert any("'rows' is a required property" in e.message
               for e in jsonschema.Draft202012Validator(results).iter_errors(CATALOG_ENTRY))
    path = _write(tmp_path / "registry" / "benchmark" / "wren-eval.json", CATALOG_ENTRY)
    db = tmp_path / "r.sqlite3"
    code, out = _run("registry", "import", str(path), "--db", str(db))
    assert code == 0 and "imported benchmark wren-eval" in out, out


def test_a_broken_catalog_entry_is_refused_by_the_catalog_schemas_rule(tmp_path: Path) -> None:
    entry = {**CATALOG_ENTRY, "runner": {**CATALOG_ENTRY["runner"], "status": "automatic"}}
    assert upstream_problems("benchmark", entry) == [
        "runner.status: 'automatic' is not one of ['available', 'manual'] (upstream schema "
        "benchmark-catalog.schema.json)"]
    path = _write(tmp_path / "benchmark" / "wren-eval.json", entry)
    code, out = _run("registry", "import", str(path), "--db", str(tmp_path / "r.sqlite3"))
    assert code == 1 and "benchmark-catalog.schema.json" in out, out


def test_a_results_table_is_still_checked_by_the_results_schema() -> None:
    table = json.loads((TREE / "benchmark" / "wren-arena.json").read_text())
    assert upstream_stem("benchmark", table) == "benchmark" and upstream_problems("benchmark", table) == []
    del table["rows"][0]["rank"]
    assert upstream_problems("benchmark", table) == [
        "rows.0: 'rank' is a required property (upstream schema benchmark.schema.json)"]


@pytest.fixture
def tree_with_reported(tmp_path: Path) -> Path:
    tree = tmp_path / "registry"
    shutil.copytree(TREE, tree)
    (measured,) = (tree / "recipes" / CARD).glob("*.json")
    doc = json.loads(measured.read_text())
    doc["proof"] = [REPORTED_PROOF]
    _write(tree / "recipes" / CARD / "wren-7b.llama.cpp-wren-7b-q4-32k.32k.reported.json", doc, compact=True)
    return tree


def test_a_reported_lab_proof_imports_and_ranks_below_every_measured_figure(tree_with_reported: Path,
                                                                         tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    code, out = _run("registry", "import", str(tree_with_reported), "--db", str(db))
    assert code == 0 and " 0 refused" in out, out
    code, out = _run("registry", "choose", "wren-7b", "--db", str(db), "--json")
    assert code == 0, out
    cands = json.loads(out)["candidates"]
    rid = f"{CARD}/wren-7b.llama.cpp-wren-7b-q4-32k.32k.reported"
    (reported,) = [c for c in cands if c["recipe_id"] == rid]
    assert reported["figure"]["reported"] is True and reported["figure"]["decode_tok_s"] == 500.0
    measured = [i for i, c in enumerate(cands) if c["figure"] and not c["figure"]["reported"]]
    assert measured and max(measured) < cands.index(reported)  # 500 tok/s reported still ranks below 61.5 measured
    code, out = _run("registry", "choose", "wren-7b", "--db", str(db))
    line = next(x for x in out.splitlines() if rid in x)
    assert "reported decode 500.00 tok/s" in line and "reported by acme-lab" in line


def test_a_proof_without_gates_that_is_not_reported_is_still_refused(tmp_path: Path) -> None:
    (measured,) = (TREE / "recipes" / CARD).glob("*.json")
    doc = json.loads(measured.read_text())
    doc["proof"] = [{**REPORTED_PROOF, "reported": False}]
    assert any("proof.0.gates" in p for p in upstream_problems("lab_recipe", doc, folder=CARD))
    doc["proof"] = [REPORTED_PROOF]
    assert upstream_problems("lab_recipe", doc, folder=CARD) == []


# A benchmark run written from the registry's published schema (registry/schema/benchmark-run.schema.json at e88b860)
# and the form of its registry/benchmark-run/ files; the model and its score are fictitious.
BENCHMARK_RUN: dict[str, Any] = {
    "benchmark_id": "wren-eval",
    "id": "acme-wren-7b-gguf--q4-k-m--wren-eval",
    "inherited_from": {"benchmark_run_id": None, "model_id": "wren-7b", "source_model_instance_id": None,
                       "source_model_repository": "acme/Wren-7B"},
    "model_id": "wren-7b",
    "model_instance_id": "acme-wren-7b-gguf--q4-k-m",
    "protocol": {"details": "as the model card states it", "name": "Wren-Eval", "shots": 0, "split": "test",
                 "version": None},
    "provenance": {"captured_at": "2026-09-01T10:00:00Z",
                   "sources": [{"captured_at": "2026-09-01T10:00:00Z", "kind": "model-card",
                                "url": "https://example.invalid/acme/Wren-7B"}]},
    "schema_version": "local-ai-registry/v1",
    "score": {"higher_is_better": True, "metric": "reported_score", "unit": "points", "value": 61.5},
    "score_origin": "inherited",
    "source": {"captured_at": "2026-09-01T10:00:00Z", "kind": "model-card", "reported_model": "acme/Wren-7B",
               "url": "https://example.invalid/acme/Wren-7B"},
}


def test_a_benchmark_run_is_a_kind_of_its_own_checked_by_its_schema(tmp_path: Path) -> None:
    """Issue 33 (open item 4): the registry's registry/benchmark-run/ records had no kind here: read as no record (a
    folder import skipped them) or, by their folder, as a benchmark checked by another schema. Now the kind
    benchmark_run, checked by benchmark-run.schema.json as vendored (registry commit e88b860)."""
    from servepack.registry.format import record_kind

    assert record_kind(BENCHMARK_RUN) == "benchmark_run"
    assert record_kind(BENCHMARK_RUN, "benchmark-run") == "benchmark_run"
    assert upstream_stem("benchmark_run", BENCHMARK_RUN) == "benchmark-run"
    assert upstream_problems("benchmark_run", BENCHMARK_RUN) == []
    # the wrong answer: either schema of a benchmark refuses the registry's own benchmark run
    assert upstream_problems("benchmark", BENCHMARK_RUN) != []
    _write(tmp_path / "registry" / "benchmark-run" / f"{BENCHMARK_RUN['id']}.json", BENCHMARK_RUN)
    db = tmp_path / "r.sqlite3"
    code, out = _run("registry", "import", str(tmp_path / "registry"), "--db", str(db))
    assert code == 0 and "1 imported" in out and "benchmark runs" in out, out
    code, out = _run("registry", "show", BENCHMARK_RUN["id"], "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["kind"] == "benchmark_run", out


@pytest.mark.parametrize(("change", "said"), [
    ({"score_origin": "direct"}, "inherited_from: {"),
    ({"score": {"metric": "reported_score", "unit": "points", "value": 61.5}},
     "score: 'higher_is_better' is a required property"),
    ({"source": {**BENCHMARK_RUN["source"], "kind": "blog"}}, "source.kind: 'blog' is not one of"),
])
def test_a_broken_benchmark_run_is_refused_by_its_schemas_rule(tmp_path: Path, change: dict[str, Any],
                                                                said: str) -> None:
    run = {**BENCHMARK_RUN, **change}
    problems = upstream_problems("benchmark_run", run)
    assert problems and problems[0].startswith(said) and problems[0].endswith(
        "(upstream schema benchmark-run.schema.json)")
    path = _write(tmp_path / "benchmark-run" / f"{BENCHMARK_RUN['id']}.json", run)
    code, out = _run("registry", "import", str(path), "--db", str(tmp_path / "r.sqlite3"))
    assert code == 1 and "benchmark-run.schema.json" in out, out
