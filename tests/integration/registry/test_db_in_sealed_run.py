"""`registry import --db PATH` never creates or writes the database inside a finished results directory: the file
made the run fail `servepack verify` ("file not covered by receipt.json"). One line naming --db, exit 2, before
anything is read; the run stays as sealed. A read command (`registry list`) never writes, so it may read one there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.records.verify import verify_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "records"))

from records_synth import make_run

FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


@pytest.mark.parametrize("where", ["registry.sqlite3", "sub/registry.sqlite3"])
def test_a_database_is_never_written_into_a_finished_run(tmp_path: Path, where: str) -> None:
    run = make_run(tmp_path, "run")
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert verify_run(run).ok
    db = run / where
    result = CliRunner().invoke(cli, ["registry", "import", str(FIXTURE), "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"servepack: error: --db {db} lies inside the finished results directory {run} (it has a receipt); results "
        "directories are sealed, so write it somewhere outside"]
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before and verify_run(run).ok


def test_the_same_import_elsewhere_is_made(tmp_path: Path) -> None:
    db = tmp_path / "elsewhere" / "registry.sqlite3"
    db.parent.mkdir()
    result = CliRunner().invoke(cli, ["registry", "import", str(FIXTURE), "--db", str(db)])
    assert result.exit_code == 0 and db.is_file(), result.output
