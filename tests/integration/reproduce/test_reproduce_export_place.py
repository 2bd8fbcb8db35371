"""`reproduce --export DIR` is checked before anything is launched: inside `--out` (the run's own results directory,
sealed when the run ends) it is refused in one line — before, the whole reproduction was measured and then its export
refused ("registry export failed: … lies inside the finished results directory"), exit 0 without the records asked
for. Loopback only (the shared fake server, never launched here); scratch directories only."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from reproduce_fixtures import FakeRecord

from servepack.cli.main import cli


@pytest.mark.parametrize("where", ["run/registry", "run"])
def test_an_export_inside_the_run_is_refused_before_launch(fake_record: FakeRecord, tmp_path: Path,
                                                         where: str) -> None:
    run, export = tmp_path / "run", tmp_path / where
    result = CliRunner().invoke(cli, ["reproduce", str(fake_record.recipe), str(fake_record.pack), "--server-bin",
                                      str(fake_record.server_bin), "--out", str(run), "--export", str(export)])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.splitlines()[-1] == (
        f"servepack: error: --export {export} lies inside --out {run}, the run's results directory, which is sealed "
        "when the run ends; put the export beside it")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing launched, nothing made
