"""One run-vs-record judgement: `compare RUN RECORD` (text and --json), the report's registry section and the
judgement itself give the same verdicts for the same run and record; a record faster than the run is SLOWER, never
REPRODUCED; facts that differ give NOT_COMPARABLE everywhere. (`reproduce` joins them in
tests/integration/reproduce/test_reproduce_judgement.py, on a run it made.)"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1] / "records"))

from records_synth import make_run, write_receipt

from servepack.cli.main import cli
from servepack.engine.server import build_argv
from servepack.errors import UsageError
from servepack.packs import load_pack
from servepack.registry.export import export_records
from servepack.registry.format import load_record
from servepack.report.page import render_report
from servepack.report.sources import load_source
from servepack.reproduce.verdict import judge_run_dir, record_side, sweep_beside
from servepack.store import ResultsDir

SEED = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"
PACK = load_pack(None)
DECODE = (36.0, 36.4, 35.7, 36.1, 35.9)
PREFILL = (160.0, 158.0, 162.0, 161.0, 159.0)
CELLS = ("256 ctx × 128 gen @c1", "1,024 ctx × 128 gen @c1")
Triple = tuple[str, str, str]


def _run(root: Path, name: str, preset: str = "default", **kw: Any) -> Path:
    """A run whose server argv is its preset's launch (as the engine builds it), so its export states that launch."""
    argv = build_argv(Path("/bin/llama-server"), Path("/models/qwen.gguf"), PACK.pack.presets[preset],
                      host="127.0.0.1", port=1)
    return make_run(root, name, preset=preset, smoke=None, decode=DECODE, prefill=PREFILL, server_argv=argv, **kw)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run and the registry recipe exported from it (its speed sweep beside it)."""
    root = tmp_path_factory.mktemp("judgement")
    run = _run(root / "p", "r")
    recipe, _ = export_records(run, root / "export")
    return run, recipe


def _edited(recipe: Path, dest: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the recipe beside it (so its speed sweep is found as for the original), edited."""
    doc = json.loads(recipe.read_text())
    edit(doc)
    out = recipe.parent / dest.name
    out.write_text(json.dumps(doc))
    return out


def _claims_decode(factor: float) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        notes = doc["metadata"]["servepack"]["notes"]

        def scale(m: re.Match[str]) -> str:
            values = [float(v.replace(",", "")) * factor for v in re.findall(r"[\d,]+\.\d+", m.group(1))]
            listed = ", ".join(f"{v:,.2f}" for v in values[:-1]) + f", and {values[-1]:,.2f}"
            return f"Decode samples were {listed} tok/s; median {sorted(values)[len(values) // 2]:,.2f}."

        doc["metadata"]["servepack"]["notes"], n = re.subn(r"Decode samples were ([^;]+); median [\d,.]+\.", scale,
                                                           notes)
        assert n == len(CELLS)
    return edit


def everywhere(run: Path, record: Path) -> dict[str, list[Triple]]:
    """(cell, metric, verdict) as the judgement, `compare --json`, `compare` text and the report give them."""
    loaded = load_record(record)
    judged = judge_run_dir(run, record_side(loaded, sweep_beside(loaded)))
    r = CliRunner().invoke(cli, ["compare", str(run), str(record), "--json"])
    assert r.exit_code == 0, r.output
    as_json = json.loads(r.stdout)
    r = CliRunner().invoke(cli, ["compare", str(run), str(record)])
    assert r.exit_code == 0, r.output
    text = [tuple(m.groups()) for line in r.stdout.splitlines()
            if (m := re.match(r"(decode_tok_s|prefill_tok_s|ttft_ms) +(.+? @c\d+) +([A-Z_]+) ", line))]
    page = render_report([load_source(run)], [loaded])
    report = re.findall(r"<span class='verdict ([A-Z_]+)' data-cell='([^']+)' data-metric='([^']+)'>", page)
    return {
        "judgement": [(v.cell, v.metric, v.verdict) for v in judged.verdicts],
        "compare --json": [(v["cell"], v["metric"], v["verdict"]) for v in as_json["verdicts"]],
        "compare": [(cell, metric, verdict) for metric, cell, verdict in text],
        "report": [(cell.replace("&#215;", "×").replace("&times;", "×"), metric, verdict)
                   for verdict, cell, metric in report],
    }


def one_answer(run: Path, record: Path) -> list[Triple]:
    found = everywhere(run, record)
    first = found["judgement"]
    assert first, found
    for where, triples in found.items():
        assert triples == first, (where, triples, first)
    return first


def test_a_run_against_its_own_record_is_reproduced_everywhere(pair: tuple[Path, Path]) -> None:
    run, recipe = pair
    triples = one_answer(run, recipe)
    assert [(c, m) for c, m, _ in triples] == [(c, m) for c in CELLS for m in ("decode_tok_s", "prefill_tok_s",
                                                                                 "ttft_ms")]
    assert {v for _, _, v in triples} == {"REPRODUCED"}
    out = CliRunner().invoke(cli, ["compare", str(run), str(recipe), "--json"]).stdout
    doc = json.loads(out)
    assert doc["comparable"] is True and doc["not_reproduced"] == []
    assert [c["state"] for c in doc["comparability"]] == ["same", "same", "same"]


def test_a_record_faster_than_the_run_is_slower_never_reproduced(pair: tuple[Path, Path], tmp_path: Path) -> None:
    run, recipe = pair
    claimed = _edited(recipe, tmp_path / "claims-faster.json", _claims_decode(1.3))
    triples = one_answer(run, claimed)
    decode = {v for _, m, v in triples if m == "decode_tok_s"}
    assert decode == {"SLOWER"}
    assert {v for _, m, v in triples if m != "decode_tok_s"} == {"REPRODUCED"}
    # and a record slower than the run: the run is FASTER
    slow = _edited(recipe, tmp_path / "claims-slower.json", _claims_decode(0.7))
    assert {v for _, m, v in one_answer(run, slow) if m == "decode_tok_s"} == {"FASTER"}


def test_other_model_bytes_are_not_comparable_everywhere(pair: tuple[Path, Path], tmp_path: Path) -> None:
    run, recipe = pair

    def other_model(doc: dict[str, Any]) -> None:
        doc["metadata"]["servepack"]["model_sha256"] = "b" * 64

    record = _edited(recipe, tmp_path / "other-model.json", other_model)
    triples = one_answer(run, record)
    assert {v for _, _, v in triples} == {"NOT_COMPARABLE"}  # the same numbers, other weights
    doc = json.loads(CliRunner().invoke(cli, ["compare", str(run), str(record), "--json"]).stdout)
    assert [c["state"] for c in doc["comparability"]] == ["same", "same", "differs"]
    assert all(v["reason"].startswith("model differs: a reproduction cannot be claimed") for v in doc["verdicts"])


def test_another_engine_build_is_not_comparable_everywhere(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    _, recipe = pair
    other = _run(tmp_path / "p", "other-engine", engine_sha="f" * 64)
    triples = one_answer(other, recipe)
    assert {v for _, _, v in triples} == {"NOT_COMPARABLE"}


def test_a_run_served_with_other_flags_is_not_comparable(pair: tuple[Path, Path], tmp_path: Path) -> None:
    _, recipe = pair
    other = _run(tmp_path / "p", "spec", preset="spec-ngram")
    assert {v for _, _, v in one_answer(other, recipe)} == {"NOT_COMPARABLE"}
    doc = json.loads(CliRunner().invoke(cli, ["compare", str(other), str(recipe), "--json"]).stdout)
    launch = [c for c in doc["comparability"] if c["what"] == "launch"]
    assert len(launch) == 1 and launch[0]["state"] == "differs"
    assert "the run served with other flags than the record's launch" in launch[0]["detail"]


def test_a_cell_the_run_did_not_measure_is_not_comparable(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    _, recipe = pair
    short = _run(tmp_path / "p", "only-256", marks=(256,))
    triples = one_answer(short, recipe)
    assert {v for c, _, v in triples if c == CELLS[0]} == {"REPRODUCED"}
    assert {v for c, _, v in triples if c == CELLS[1]} == {"NOT_COMPARABLE"}
    doc = json.loads(CliRunner().invoke(cli, ["compare", str(short), str(recipe), "--json"]).stdout)
    missing = [v["reason"] for v in doc["verdicts"] if v["cell"] == CELLS[1]]
    assert missing and all(r.startswith(f"the run has no cell {CELLS[1]} (it measured 256 ctx") for r in missing)


def test_the_seed_states_the_facts_first_and_is_not_comparable(pair: tuple[Path, Path]) -> None:
    run, _ = pair
    r = CliRunner().invoke(cli, ["compare", str(run), str(SEED)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("! hardware: DIFFERS: record dgx-spark-gb10-128gb")
    assert lines[1].startswith("! engine build: DIFFERS: record llama.cpp '1 (04b2b72)'")
    assert lines[2].startswith("! model: DIFFERS: record pins sha256 7da520c5f44b")
    said = "→ NOT_COMPARABLE: no metric can be claimed REPRODUCED (hardware differs"
    assert any(line.startswith(said) for line in lines)
    triples = one_answer(run, SEED)
    assert triples == [("8,192 ctx × 1,024 gen @c1", m, "NOT_COMPARABLE")
                       for m in ("decode_tok_s", "prefill_tok_s", "ttft_ms")]


def test_a_record_stating_no_launch_is_not_comparable(pair: tuple[Path, Path], tmp_path: Path) -> None:
    run, recipe = pair

    def reference_only(doc: dict[str, Any]) -> None:
        seed = json.loads(SEED.read_text())["data"]
        doc["launch"] = seed["launch"]  # a reference to another site, with no argv
        doc["facts"] = {k: v for k, v in doc["facts"].items() if not k.startswith("launch.")}
        doc["metadata"]["servepack"]["tokenized"] = {"fidelity": "lossy"}  # an endpoint-only record: no argv

    record = _edited(recipe, tmp_path / "reference.json", reference_only)
    assert {v for _, _, v in one_answer(run, record)} == {"NOT_COMPARABLE"}
    doc = json.loads(CliRunner().invoke(cli, ["compare", str(run), str(record), "--json"]).stdout)
    launch = doc["comparability"][-1]
    assert launch["what"] == "launch" and launch["state"] == "unknown"
    assert "cannot reproduce here because the record states no command to run" in launch["detail"]


def test_a_tolerance_widens_the_band_in_compare(pair: tuple[Path, Path], tmp_path: Path) -> None:
    run, recipe = pair
    claimed = _edited(recipe, tmp_path / "claims-8pct.json", _claims_decode(1.08))
    judged = judge_run_dir(run, record_side(load_record(claimed), None))
    assert {v.verdict for v in judged.verdicts if v.metric == "decode_tok_s"} == {"SLOWER"}
    r = CliRunner().invoke(cli, ["compare", str(run), str(claimed), "--json", "--tolerance", "15"])
    assert r.exit_code == 0, r.output
    assert {v["verdict"] for v in json.loads(r.stdout)["verdicts"] if v["metric"] == "decode_tok_s"} == {"REPRODUCED"}


def test_a_speed_sweep_is_refused_naming_its_recipe(pair: tuple[Path, Path]) -> None:
    run, recipe = pair
    sweep = load_record(recipe).record["speed_sweep_ids"][0]
    path = recipe.parents[1] / "speed-sweep" / f"{sweep}.json"
    r = CliRunner().invoke(cli, ["compare", str(run), str(path)])
    assert r.exit_code == 2
    assert "a speed sweep record; give its recipe" in r.stderr
    with pytest.raises(UsageError, match="a speed sweep record"):
        record_side(load_record(path), None)


def test_a_run_without_a_bench_or_a_record_without_a_protocol_is_one_usage_line(pair: tuple[Path, Path],
                                                                                tmp_path: Path) -> None:
    run, recipe = pair
    smoke_only = tmp_path / "p" / "smoke"
    shutil.copytree(run, smoke_only)
    for name in ("server_bench.json", "receipt.json"):
        (smoke_only / name).unlink()
    write_receipt(ResultsDir(smoke_only), PACK, "default", "2026-07-28T10:00:00.000Z", "complete")
    r = CliRunner().invoke(cli, ["compare", str(smoke_only), str(recipe)])
    assert r.exit_code == 2
    assert r.stderr.strip().endswith(f"{smoke_only}: no bench summary to compare with a registry record; give a run "
                                     "that benched")

    def no_cells(doc: dict[str, Any]) -> None:
        doc["metadata"]["servepack"]["notes"] = "Measured by servepack."
        doc["speed_sweep_ids"] = []

    record = _edited(recipe, tmp_path / "no-protocol.json", no_cells)
    r = CliRunner().invoke(cli, ["compare", str(run), str(record)])
    assert r.exit_code == 2 and "the record states no protocol" in r.stderr
