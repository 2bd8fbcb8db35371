"""A run measured over real HTTP against the shared fake server, exported and checked against the registry's rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))

from core_fixtures import make_pack, write_fake_server_bin

from servepack.cli.main import cli


def test_a_fake_run_exports_records_that_pass_the_registry_rules(tmp_path: Path) -> None:
    """On a CPU-only host the run goes out in the registry's lab format (a CPU card), which its rules accept; on a
    GPU host in its collections. Either way `registry check` passes the folder."""
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
    cpu_box = json.loads((run / "receipt.json").read_text())["host"]["gpus"] == []
    folders = {rel.split("/")[0] for rel in paths["written"]}
    if cpu_box:
        assert folders == {"lab", "model", "model-instance", "servepack"} and paths["lab_run"]
        assert json.loads(Path(paths["lab_run"]).read_text())["recipe"]["card"] == recipe["hardware_id"]
    else:
        assert {"model", "model-instance", "recipe", "speed-sweep"} <= folders and paths["lab_run"] is None
    model = json.loads((out / "model" / f"{json.loads((out / 'model-instance' / 'tiny.json').read_text())['model_id']}"
                                          ".json").read_text())
    assert model["params"] > 0  # the tiny GGUF's 64 parameters, in billions, not rounded away
    checked = CliRunner().invoke(cli, ["registry", "check", str(out), "--json"])
    assert json.loads(checked.stdout)["problems"] == [] and checked.exit_code == 0
    assert paths["not_submittable"] == []
