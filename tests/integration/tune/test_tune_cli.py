"""`servepack tune` on the command line: bad input is one line and exit 2, before any server starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tune_fixtures import write_space

from servepack.cli.main import cli
from servepack.packs import shipped_pack_paths


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["tune", *args])
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def space(tmp_path: Path) -> Path:
    return write_space(tmp_path, '[tune]\nthreads = [4, 8]\nflash-attn = "on"\n')


def test_bad_input_is_one_line_and_exit_2(tune_pack: Path, surface_bin: Path, space: Path, tmp_path: Path) -> None:
    shipped = next(iter(shipped_pack_paths().values()))
    before = shipped.read_bytes()
    cases = [
        (["--write-pack", str(shipped)], "shipped pack"),
        (["--space", str(tmp_path / "absent.toml")], "no such file"),
        (["--preset", "nope"], "preset 'nope' is not in pack"),
        (["--preset-name", "Bad Name"], "--preset-name"),
        (["--budget-time", "soon"], "--budget-time"),
        (["--resume", str(tmp_path)], "--resume continues the tune's own pack"),
        (["--server-bin", str(tmp_path / "no-such-server")], "no-such-server"),
        (["--model-file", str(tmp_path / "absent.gguf")], "--model-file"),
        (["--out", str(space)], "not a directory"),
    ]
    for extra, words in cases:
        code, _, err = _run(str(tune_pack), "--space", str(space), "--server-bin", str(surface_bin),
                            "--out", str(tmp_path / "never"), *extra)
        assert code == 2 and words in err, (extra, err)
        assert len(err.strip().splitlines()) == 1, err
    assert shipped.read_bytes() == before
    assert not (tmp_path / "never" / "trials.jsonl").exists()
    code, _, err = _run("--resume", str(tmp_path / "empty"))
    assert code == 2 and "no tune.json" in err


def test_a_short_tune_renders_and_prints_its_result(tune_pack: Path, surface_bin: Path, space: Path,
                                                    tmp_path: Path) -> None:
    out = tmp_path / "tune"
    code, stdout, err = _run(str(tune_pack), "--space", str(space), "--server-bin", str(surface_bin), "--out",
                             str(out), "--budget-trials", "3", "--confirm-samples", "3", "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["schema_version"] == "servepack.tune.result/v1" and doc["trials"] == 3
    assert doc["best"]["config"] == {"threads": 8, "flash-attn": "on"}
    assert doc["decision"] in ("PROMOTE", "INCONCLUSIVE", "DO_NOT_PROMOTE") and doc["comparison"] is not None
    said = " ".join(err.split())  # rich wraps progress lines at the terminal's width
    assert "trial 3/3 (screen) flash-attn=on threads=8" in said and f"decision: {doc['decision']}" in said
    code, _, err = _run(str(tune_pack), "--space", str(space), "--server-bin", str(surface_bin), "--out", str(out))
    assert code == 2 and f"--resume {out}" in err


def test_the_packs_own_tune_table_is_the_space_without_space(tune_pack: Path, surface_bin: Path,
                                                             tmp_path: Path) -> None:
    pack = tmp_path / "with-tune.toml"
    pack.write_text(tune_pack.read_text() + '\n[tune]\nthreads = [4, 8]\nflash-attn = "on"\n')
    code, stdout, err = _run(str(pack), "--server-bin", str(surface_bin), "--out", str(tmp_path / "t"),
                             "--budget-trials", "3", "--confirm-samples", "3", "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    said = " ".join(err.split())
    assert "[tune]: 2 configurations hold the constraints" in said
    assert doc["best"]["config"] == {"threads": 8, "flash-attn": "on"}  # never the host's default grid


@pytest.mark.parametrize("table, words", [
    ('threads = [4, 4]', "threads: a candidate is listed twice"),
    ('port = [8080, 8081]', "is set by servepack itself"),
    ('batch-size = { min = 512 }', "a range is { min = A, max = B, step = S }"),
])
def test_a_bad_tune_table_fails_pack_validate_naming_the_field(tune_pack: Path, tmp_path: Path, table: str,
                                                               words: str) -> None:
    pack = tmp_path / "bad-tune.toml"
    pack.write_text(tune_pack.read_text() + f"\n[tune]\n{table}\n")
    r = CliRunner().invoke(cli, ["pack", "validate", str(pack)])
    assert r.exit_code == 2 and f"{pack}: field tune: " in r.stderr and words in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
