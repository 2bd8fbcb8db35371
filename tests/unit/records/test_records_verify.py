"""verify_run: every hash and every summary figure, and each kind of edit named by its file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from records_synth import make_run

from servepack.errors import VerificationError
from servepack.records.verify import verify_run


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "pack", "20260728T100000Z-run")


def _rewrite(path: Path, text: str) -> None:
    path.chmod(0o644)
    path.write_text(text)


def test_untouched_run_verifies(run: Path) -> None:
    report = verify_run(run)
    assert report.ok, [m.line() for m in report.mismatches]
    assert report.files_checked == 5  # requests.jsonl, server_bench.json, agent_smoke(.cases).json(l), server.log
    assert report.figures_checked > 50
    report.raise_for_mismatch()


def test_measured_md_is_derived_and_ignored(run: Path) -> None:
    (run / "MEASURED.md").write_text("# derived\n")
    assert verify_run(run).ok


def test_edited_sample_names_the_raw_file_and_the_summary(run: Path) -> None:
    path = run / "requests.jsonl"
    lines = path.read_text().splitlines()
    sample = json.loads(lines[1])
    assert sample["warmup"] is False
    sample["decode_tok_s_server"] = 99.0
    lines[1] = json.dumps(sample)
    _rewrite(path, "\n".join(lines) + "\n")
    report = verify_run(run)
    assert report.files_named == ["requests.jsonl", "server_bench.json"]
    changed = [m for m in report.mismatches if m.file == "requests.jsonl"]
    assert changed[0].what == "sha256 changed"
    figures = [m.what for m in report.mismatches if m.file == "server_bench.json"]
    assert "cells[ctx=256,c=1].decode_tok_s_server.max" in figures
    with pytest.raises(VerificationError, match=r"requests\.jsonl, server_bench\.json") as info:
        report.raise_for_mismatch()
    assert info.value.exit_code == 1


def test_edited_summary_figure_is_a_named_mismatch(run: Path) -> None:
    path = run / "server_bench.json"
    doc = json.loads(path.read_text())
    recorded = doc["cells"][1]["decode_tok_s_server"]["median"]
    doc["cells"][1]["decode_tok_s_server"]["median"] = recorded + 5
    _rewrite(path, json.dumps(doc, indent=2))
    report = verify_run(run)
    assert report.files_named == ["server_bench.json"]
    lines = [m.line() for m in report.mismatches]
    assert any(line.startswith("server_bench.json: cells[ctx=1024,c=1].decode_tok_s_server.median: recorded "
                               f"{recorded + 5!r}, recomputed {recorded!r}") for line in lines), lines


def test_edited_smoke_pass_count(run: Path) -> None:
    path = run / "agent_smoke.json"
    doc = json.loads(path.read_text())
    assert doc["strict_passed"] == 2
    doc["strict_passed"] = 3
    _rewrite(path, json.dumps(doc))
    report = verify_run(run)
    assert report.files_named == ["agent_smoke.json"]
    assert any(m.what == "strict_passed" and m.recorded == "3" and m.recomputed == "2" for m in report.mismatches)


def test_edited_case_verdict_is_caught_by_its_attempts(run: Path) -> None:
    path = run / "agent_smoke.json"
    doc = json.loads(path.read_text())
    doc["cases"][2]["strict_pass"] = True
    doc["strict_passed"] = 3
    doc["categories"]["tool_json"]["strict_passed"] = 3
    _rewrite(path, json.dumps(doc))
    whats = {m.what for m in verify_run(run).mismatches if m.file == "agent_smoke.json"}
    assert {"cases[c2].strict_pass", "sha256 changed"} <= whats


def test_summary_case_rewritten_consistently_still_differs_from_the_raw_log(run: Path) -> None:
    path = run / "agent_smoke.json"
    doc = json.loads(path.read_text())
    case = doc["cases"][2]
    case["strict_pass"] = case["lenient_pass"] = True
    case["codes"] = []
    for attempt in case["attempts"]:
        attempt["verdict"] = {"strict_pass": True, "lenient_pass": True, "findings": []}
    doc["strict_passed"] = doc["lenient_passed"] = 3
    doc["categories"]["tool_json"].update(strict_passed=3, lenient_passed=3)
    doc["failure_codes"] = {}
    _rewrite(path, json.dumps(doc))
    whats = [m.what for m in verify_run(run).mismatches if m.file == "agent_smoke.json"]
    assert whats == ["sha256 changed", "cases[c2] against agent_smoke.cases.jsonl"]


def test_deleted_file(run: Path) -> None:
    (run / "server.log").unlink()
    report = verify_run(run)
    assert [(m.file, m.what) for m in report.mismatches] == [
        ("server.log", "file listed in receipt.json is missing")
    ]


def test_added_file(run: Path) -> None:
    (run / "extra_samples.jsonl").write_text("{}\n")
    report = verify_run(run)
    assert report.files_named == ["extra_samples.jsonl"]
    assert "not covered by receipt.json" in report.mismatches[0].what


def test_deleted_raw_file_breaks_the_summary_too(run: Path) -> None:
    (run / "requests.jsonl").unlink()
    report = verify_run(run)
    assert report.files_named == ["requests.jsonl", "server_bench.json"]


def test_no_receipt(tmp_path: Path) -> None:
    with pytest.raises(VerificationError, match=r"receipt\.json: no receipt"):
        verify_run(tmp_path)


def _verify_cli(run_dir: Path) -> tuple[int, str, BaseException | None]:
    from click.testing import CliRunner

    from servepack.cli.main import cli

    result = CliRunner().invoke(cli, ["verify", str(run_dir)])
    return result.exit_code, result.stderr, result.exception


@pytest.mark.parametrize(("label", "content", "expect"), [
    ("binary", bytes(range(256)) * 16, "not UTF-8 JSON (binary at byte 128)"),
    ("nested 20,000 deep", b"[" * 20_000 + b"]" * 20_000, "not JSON (Invalid JSON: recursion limit exceeded"),
    ("truncated", b'{"schema_version": "servepack.receipt/v1", "run_id": ', "not JSON (Invalid JSON: EOF"),
    ("empty", b"", "not JSON (Invalid JSON: EOF"),
])
def test_a_receipt_that_is_not_json_is_one_line_exit_2(run: Path, label: str, content: bytes, expect: str) -> None:
    (run / "receipt.json").chmod(0o644)
    (run / "receipt.json").write_bytes(content)
    code, err, exc = _verify_cli(run)
    assert isinstance(exc, SystemExit) and code == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith(f"servepack: error: {run / 'receipt.json'}: {expect}"), err
    assert lines[-1].endswith("restore receipt.json from a copy of the results directory, or run again")
    assert "Traceback" not in err


def test_a_receipt_that_is_json_but_not_a_receipt_still_fails_verification(run: Path) -> None:
    _rewrite(run / "receipt.json", json.dumps({"schema_version": "servepack.receipt/v1"}))
    code, err, exc = _verify_cli(run)
    assert isinstance(exc, SystemExit) and code == 1
    assert err.strip().splitlines()[-1].startswith(f"servepack: error: {run / 'receipt.json'}: field ")


@pytest.mark.parametrize("name", ["../outside.json", "/etc/hostname.json", "a/../../outside.json", "x\\..\\y.json"])
def test_a_receipt_naming_a_file_outside_the_run_is_a_mismatch(run: Path, name: str) -> None:
    (run.parent / "outside.json").write_text(json.dumps({"schema_version": "servepack.bench/v1"}))
    doc = json.loads((run / "receipt.json").read_text())
    doc["files"][name] = "0" * 64
    _rewrite(run / "receipt.json", json.dumps(doc))
    report = verify_run(run)
    refused = [m for m in report.mismatches if m.file == name and "outside the results directory" in m.what]
    assert len(refused) == 1 and not report.ok


def test_a_summary_whose_raw_file_is_outside_the_run_is_a_mismatch(run: Path) -> None:
    path = run / "server_bench.json"
    doc = json.loads(path.read_text())
    (run.parent / "stolen.jsonl").write_text((run / doc["requests_file"]).read_text())
    doc["requests_file"] = "../stolen.jsonl"
    _rewrite(path, json.dumps(doc))
    whats = [m.what for m in verify_run(run).mismatches if m.file == "server_bench.json"]
    assert "requests_file '../stolen.jsonl' is not a file name inside the results directory" in whats


def test_a_summary_whose_raw_file_is_gone_says_missing_not_outside(run: Path) -> None:
    doc = json.loads((run / "server_bench.json").read_text())
    (run / doc["requests_file"]).unlink()
    whats = [m.what for m in verify_run(run).mismatches if m.file == "server_bench.json"]
    assert f"raw file {doc['requests_file']} is missing" in whats, whats
    assert not any("not a file name inside" in w for w in whats), whats


def test_a_smoke_suite_name_that_climbs_out_is_a_mismatch(run: Path) -> None:
    path = run / "agent_smoke.json"
    doc = json.loads(path.read_text())
    doc["suite"] = "../../elsewhere"
    _rewrite(path, json.dumps(doc))
    whats = [m.what for m in verify_run(run).mismatches if m.file == "agent_smoke.json"]
    assert "suite '../../elsewhere' names a file outside the results directory" in whats


@pytest.mark.parametrize("name", ["requests.jsonl", "agent_smoke.cases.jsonl", "server_bench.json"])
def test_binary_raw_files_are_mismatches_not_crashes(run: Path, name: str) -> None:
    _rewrite(run / name, "")
    (run / name).write_bytes(b"\xff\xfe\x00garbage\n" * 10)
    report = verify_run(run)
    assert name in report.files_named and not report.ok


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_receipt_that_is_not_a_file_is_named_as_what_it_is_never_missing(run: Path, kind: str) -> None:
    """Issue 35: a receipt.json that is a FIFO was "no receipt"; it is there, and not a regular file. The FIFO is
    never opened blocking (verify would wait for a writer forever)."""
    receipt = run / "receipt.json"
    receipt.unlink()
    if kind == "fifo":
        os.mkfifo(receipt)
    else:
        receipt.mkdir()
    code, err, _ = _verify_cli(run)
    what = "a FIFO (named pipe)" if kind == "fifo" else "a folder"
    assert code == 2 and f"receipt.json: not a regular file ({what})" in err and "no receipt" not in err, err
    assert sum(line.startswith("servepack: error:") for line in err.splitlines()) == 1
