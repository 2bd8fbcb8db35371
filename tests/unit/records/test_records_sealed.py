"""Sealed results directories (issue 11, items 8 and 11): exports never land inside a run, links are refused,
and a receipt a run had to write elsewhere is what `verify` reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from records_synth import make_run

from servepack.cli.main import cli
from servepack.errors import UsageError, VerificationError
from servepack.records.receipt import Receipt, find_fallback_receipt, write_fallback_receipt
from servepack.records.verify import verify_run
from servepack.registry.export import export_records


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "pack", "20260728T100000Z-run")


@pytest.mark.parametrize("target", [".", "x", "x/y", "recipe"])
def test_registry_export_into_the_run_is_refused_and_the_run_still_verifies(run: Path, target: str) -> None:
    with pytest.raises(UsageError, match=r"registry export --out .* the finished results directory .*sealed"):
        export_records(run, run / target)
    assert verify_run(run).ok
    res = CliRunner().invoke(cli, ["registry", "export", str(run), "--out", str(run / target)])
    assert res.exit_code == 2 and "sealed" in res.output and "Traceback" not in res.output
    assert verify_run(run).ok


def test_registry_export_beside_the_run_is_written(run: Path, tmp_path: Path) -> None:
    recipe, sweep = export_records(run, tmp_path / "exports")
    assert recipe.is_file() and sweep.is_file() and verify_run(run).ok


@pytest.mark.parametrize("where", ["host.txt", "sub/host.txt", "server.log"])
def test_a_link_inside_a_run_is_a_named_mismatch(run: Path, tmp_path: Path, where: str) -> None:
    host = tmp_path / "host-secret.txt"
    host.write_text("not part of the run\n")
    link = run / where
    if link.exists():
        # The link points at a host file with the very bytes the receipt covers: the hashes alone would pass it.
        host.write_bytes(link.read_bytes())
        link.chmod(0o644)
        link.unlink()
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(host)
    report = verify_run(run)
    assert not report.ok
    assert any(m.file == where and "symbolic link" in m.what and str(host) in m.recomputed
               for m in report.mismatches)
    if where == "server.log":
        whats = {m.what for m in report.mismatches}
        assert "file listed in receipt.json is missing" in whats  # a link is not the file the run wrote
        assert not any(w.startswith("sha256") for w in whats)  # same bytes: only the link gives it away


def test_a_linked_directory_inside_a_run_is_refused(run: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.json").write_text("{}")
    (run / "more").symlink_to(outside)
    report = verify_run(run)
    assert [m.file for m in report.mismatches] == ["more"]


def test_a_linked_receipt_is_refused(run: Path, tmp_path: Path) -> None:
    (run / "receipt.json").rename(tmp_path / "r.json")
    (run / "receipt.json").symlink_to(tmp_path / "r.json")
    with pytest.raises(VerificationError, match=r"receipt.json is a symbolic link"):
        verify_run(run)


def test_a_run_reached_through_a_link_still_verifies(run: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(run)
    assert verify_run(tmp_path / "alias").ok


def test_verify_reads_the_receipt_a_run_wrote_elsewhere(run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    receipt = Receipt.model_validate_json((run / "receipt.json").read_bytes())
    failed = receipt.model_copy(update={"status": "failed", "error": "cannot write memory_summary.json (disk full)"})
    (run / "receipt.json").unlink()
    where = write_fallback_receipt(failed, run, cache)
    assert where is not None and where.parent == cache / "unwritten-receipts"
    assert find_fallback_receipt(run, cache) == where
    report = verify_run(run, cache_dir=cache)
    assert report.ok and report.receipt_elsewhere and report.receipt_path == where
    assert report.status == "failed" and "disk full" in (report.error or "")


def test_a_fallback_receipt_is_only_found_for_its_own_run(run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    receipt = Receipt.model_validate_json((run / "receipt.json").read_bytes())
    other = tmp_path / "pack" / "other-run"
    shutil.copytree(run, other)
    (other / "receipt.json").unlink()
    write_fallback_receipt(receipt, run, cache)
    with pytest.raises(VerificationError, match="no receipt"):
        verify_run(other, cache_dir=cache)


def test_verify_cli_says_where_the_receipt_came_from(run: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "cache"))
    receipt = Receipt.model_validate_json((run / "receipt.json").read_bytes())
    failed = receipt.model_copy(update={"status": "failed", "error": "results directory full"})
    (run / "receipt.json").unlink()
    write_fallback_receipt(failed, run, tmp_path / "cache")
    res = CliRunner().invoke(cli, ["verify", str(run), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert doc["ok"] and doc["receipt_elsewhere"] and doc["status"] == "failed"
    assert "could not write its receipt" in res.stderr and "ended failed: results directory full" in res.stderr


def test_registry_export_under_a_file_is_one_line_exit_2(run: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    res = CliRunner().invoke(cli, ["registry", "export", str(run), "--out", str(tmp_path / "afile" / "x")])
    assert res.exit_code == 2 and "cannot create the export directory" in res.output
    assert "afile is a file, not a directory; choose another --out" in res.output and "Traceback" not in res.output
