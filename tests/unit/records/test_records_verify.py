"""verify_run: every hash and every summary figure, and each kind of edit named by its file."""

from __future__ import annotations

import json
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
