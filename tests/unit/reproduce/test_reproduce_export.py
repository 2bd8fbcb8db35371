"""A reproduction's registry export is the run's `registry export` (a CPU box in the registry's lab format, no
hardware record with kind/backend cpu), its recipe, sweep and lab run naming the record reproduced; it passes the
registry's rules for a CPU and a GPU machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1] / "records"))  # records_synth
from records_synth import gpu_host, make_run

from servepack.cli.main import cli
from servepack.pipeline.reproduce import export_reproduction
from servepack.registry.format.check import upstream_problems
from servepack.reproduce.provenance import Original

PARAMS = 494_032_768
ORIGINAL = Original(id="wren-7b-native", sha256="ab" * 32, source="/records/wren-7b-native.json")
REPORT = {"tolerance_pct": 10.0, "comparable": False, "comparability": [], "verdicts": []}


def _check(folder: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["registry", "check", str(folder)])
    return result.exit_code, result.stdout + result.stderr


def test_a_cpu_reproduction_is_exported_in_the_registrys_lab_format_and_passes(tmp_path: Path) -> None:
    run = make_run(tmp_path / "p", "r", smoke=None, gguf_parameters=PARAMS)
    out = tmp_path / "out"
    recipe_path, sweep_path, lab_path = export_reproduction(run, out, ORIGINAL, REPORT)
    # the wrong answer: recipe/ and speed-sweep/ in the registry's collections naming hardware x86-64-cpu, which no
    # registry hardware record holds (its hardware kinds and backends are accelerators), and no lab run
    assert not (out / "recipe").exists() and not (out / "speed-sweep").exists() and not (out / "hardware").exists()
    assert recipe_path.parent == out / "servepack" / "recipe" and sweep_path.parent == out / "servepack" / "speed-sweep"
    assert lab_path.parent == out / "lab" / "runs" and lab_path.name.startswith("x86-64-cpu.")
    lab = json.loads(lab_path.read_text())
    assert lab["evidence"]["servepack"]["reproduces"] == {"record_id": "wren-7b-native", "record_sha256": "ab" * 32}
    assert upstream_problems("lab_run", lab) == []
    recipe = json.loads(recipe_path.read_text())
    assert recipe["metadata"]["servepack"]["reproduces"]["record_id"] == "wren-7b-native"
    assert recipe["metadata"]["servepack"]["lab_run"] == lab_path.relative_to(out).as_posix()
    assert json.loads(sweep_path.read_text())["recipe_id"] == recipe["id"]
    assert {p.parent.name for p in (out / "model-instance").glob("*.json")} == {"model-instance"}
    code, said = _check(out)
    assert code == 0, said


def test_a_gpu_reproduction_is_exported_in_the_registrys_collections_and_passes(tmp_path: Path) -> None:
    run = make_run(tmp_path / "p", "r", host=gpu_host(), gguf_parameters=PARAMS)
    out = tmp_path / "out"
    exported = export_reproduction(run, out, ORIGINAL, REPORT)
    assert len(exported) == 2 and exported[0].parent == out / "recipe" and exported[1].parent == out / "speed-sweep"
    assert not (out / "lab").exists()
    recipe = json.loads(exported[0].read_text())
    assert recipe["hardware_id"] == "rtx-4090-24gb"
    assert any(s["kind"] == "reproduced-record" for s in recipe["provenance"]["sources"])
    code, said = _check(out)
    assert code == 0, said
    again = tmp_path / "again"
    export_reproduction(run, again, ORIGINAL, REPORT)
    assert sorted(p.relative_to(again) for p in again.rglob("*.json")) == \
        sorted(p.relative_to(out) for p in out.rglob("*.json"))


def test_a_reproduction_export_says_why_it_cannot_be_submitted(tmp_path: Path) -> None:
    """Issue 33 (open item 3): reproduce called a CPU box's lab run 'what to submit' whatever its card; its export now
    says why not, as `registry export` does (the run exported here was made on another machine: its CPU card is not
    known), and a GPU run on a published card has nothing against it."""
    why: list[str] = []
    export_reproduction(make_run(tmp_path / "c", "r", smoke=None, gguf_parameters=PARAMS), tmp_path / "cpu",
                        ORIGINAL, REPORT, why)
    assert len(why) == 1 and why[0].startswith("card x86-64-cpu: the instruction set of the run's CPU is not known")
    why = []
    export_reproduction(make_run(tmp_path / "g", "r", host=gpu_host(), gguf_parameters=PARAMS), tmp_path / "gpu",
                        ORIGINAL, REPORT, why)
    assert why == []
