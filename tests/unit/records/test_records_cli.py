"""The records commands: results on stdout, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from records_synth import make_run

from servepack.cli.main import cli

FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_verify_ok_and_failing(tmp_path: Path) -> None:
    run = make_run(tmp_path / "p", "r")
    code, out, _ = _run("verify", str(run))
    assert code == 0 and out.startswith(f"ok {run}: 5 files hashed, ")
    (run / "added.txt").write_text("x")
    code, out, err = _run("verify", str(run))
    assert code == 1
    assert out.startswith("MISMATCH added.txt: file not covered by receipt.json")
    error = [line for line in err.splitlines() if line.startswith("servepack: error: ")]
    assert len(error) == 1 and "added.txt" in error[0]


def test_compare_two_runs_prints_a_decision(tmp_path: Path) -> None:
    base = make_run(tmp_path / "p", "base", smoke=None)
    cand = make_run(tmp_path / "p", "cand", preset="spec-ngram", decode=(20.0, 20.1, 19.9), smoke=None)
    code, out, _ = _run("compare", str(base), str(cand))
    assert code == 0
    assert "decision: DO_NOT_PROMOTE" in out and "  because 256 ctx × 128 gen @c1 decode_tok_s (server): worse" in out
    code, out, _ = _run("compare", str(base), str(cand), "--json")
    assert json.loads(out)["decision"] == "DO_NOT_PROMOTE"


def test_compare_run_with_record_states_the_facts_first(tmp_path: Path) -> None:
    run = make_run(tmp_path / "p", "r", smoke=None)
    code, out, _ = _run("compare", str(run), str(FIXTURE))
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("! hardware: DIFFERS: record dgx-spark-gb10-128gb")
    assert first.endswith("vs the run's host cpu-test-cpu-9000-2c-24gb / cpu-generic (Test CPU 9000 (2 cores, "
                          "24 GiB) · no GPU)")
    decode = next(line for line in out.splitlines() if line.startswith("decode_tok_s"))
    assert " 8,192 ctx × 1,024 gen @c1 " in decode and " NOT_COMPARABLE " in decode


def test_registry_show_and_export(tmp_path: Path) -> None:
    code, out, _ = _run("registry", "show", str(FIXTURE))
    assert code == 0
    assert "decode_tok_s: n=7 [19.2, 19.3, 19.3, 19.3, 19.4, 19.4, 19.4] median 19.3" in out
    run = make_run(tmp_path / "p", "r", smoke=None)
    code, out, _ = _run("registry", "export", str(run), "--out", str(tmp_path / "reg"), "--json")
    assert code == 0
    assert Path(json.loads(out)["recipe"]).is_file()
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": "other/v9"}')
    code, _, err = _run("registry", "show", str(bad))
    assert code == 2 and "schema_version 'other/v9' is not 'local-ai-registry/v1'" in err
