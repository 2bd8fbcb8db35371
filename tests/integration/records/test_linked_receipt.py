"""A results directory whose receipt.json is a symbolic link is no sealed run for any reader (`records.verify.
read_receipt`): `verify` refused it, while `report`, `registry export` and `compare` read through the link — an
export or a page built from a receipt that lives elsewhere. Each now says so in one line (exit 1, verify's rule);
in a folder of runs, report leaves that run out. Scratch directories only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "records"))

from records_synth import make_run


@pytest.mark.parametrize("argv", [
    ["verify", "{run}"], ["report", "{run}", "--out", "{tmp}/page.html"],
    ["registry", "export", "{run}", "--out", "{tmp}/export"], ["compare", "{run}", "{run}"],
], ids=["verify", "report", "export", "compare"])
def test_a_linked_receipt_is_refused_by_every_reader(tmp_path: Path, argv: list[str]) -> None:
    run = make_run(tmp_path / "runs", "run")
    (run / "receipt.json").rename(tmp_path / "elsewhere.json")
    (run / "receipt.json").symlink_to(tmp_path / "elsewhere.json")
    result = CliRunner().invoke(cli, [a.format(run=run, tmp=tmp_path) for a in argv])
    assert result.exit_code == 1, result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("servepack:")] == [
        f"servepack: error: {run / 'receipt.json'} is a symbolic link; a results directory holds no links, so this "
        "one is not a sealed run"] or argv[0] == "verify"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.json", "runs"]  # no page, no export


def test_report_on_a_folder_leaves_the_linked_run_out(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    make_run(runs, "a", ended_at="2026-07-28T10:00:00.000Z")
    linked = make_run(runs, "b", ended_at="2026-07-28T11:00:00.000Z")
    (linked / "receipt.json").rename(tmp_path / "elsewhere.json")
    (linked / "receipt.json").symlink_to(tmp_path / "elsewhere.json")
    result = CliRunner().invoke(cli, ["report", str(runs), "--out", str(tmp_path / "page.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "page.html").read_text()
    assert "2026-07-28 10:00" in page  # run a, ended at 10:00
    assert "2026-07-28 11:00" not in page and "run b" not in page  # run b (the newest, else the page's focus)
