"""A run measured over real HTTP against the shared fake server, exported and checked against the registry's rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))

from core_fixtures import make_pack, write_fake_server_bin

from servepack.cli.main import cli

HOST_GAPS = {"accelerator_backend", "kind", "vendor"}  # a CPU-only host: the registry's hardware enums lack it


def test_a_fake_run_exports_records_that_pass_the_registry_rules_but_for_the_named_host_gaps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    bench = CliRunner().invoke(cli, ["bench", str(make_pack(tmp_path)), "--server-bin",
                                     str(write_fake_server_bin(tmp_path)), "--prompt-tokens", "40", "--gen-tokens",
                                     "16", "--samples", "3", "--out", str(run)])
    assert bench.exit_code == 0, bench.output
    out = tmp_path / "export"
    exported = CliRunner().invoke(cli, ["registry", "export", str(run), "--out", str(out), "--json"])
    assert exported.exit_code == 0, exported.output
    paths = json.loads(exported.stdout)
    recipe = json.loads(Path(paths["recipe"]).read_text())
    assert recipe["status"] == "candidate" and recipe["launch"]["kind"] == "native"
    assert recipe["speed_sweep_ids"] == [Path(paths["speed_sweep"]).stem]
    assert {rel.split("/")[0] for rel in paths["written"]} == {"hardware", "model", "model-instance", "recipe",
                                                             "speed-sweep"}
    model = json.loads((out / "model" / f"{json.loads((out / 'model-instance' / 'tiny.json').read_text())['model_id']}"
                                          ".json").read_text())
    assert model["params"] > 0  # the tiny GGUF's 64 parameters, in billions, not rounded away
    checked = CliRunner().invoke(cli, ["registry", "check", str(out), "--json"])
    problems = json.loads(checked.stdout)["problems"]
    assert problems, "a CPU-only host cannot be described in the registry's hardware enums; check must say so"
    assert all(p["file"].startswith("hardware/") and p["field"] in HOST_GAPS for p in problems)
    assert {p["field"] for p in problems} >= {"accelerator_backend", "kind"}
    assert len(paths["not_submittable"]) == len(problems) and checked.exit_code == 1
