"""Issue 25 item 6: `servepack tune` exits non-zero when nothing was measured (the baseline server failed to start),
as capacity does; a tune whose trials were measured but missed a ceiling still exits 0."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from tune_fixtures import dies_on_launch, write_space

from servepack.cli.main import cli


def _tune(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["tune", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr


def test_a_tune_whose_baseline_never_started_exits_non_zero(tune_pack: Path, tmp_path: Path) -> None:
    space = write_space(tmp_path, '[tune]\nthreads = [4, 8]\nflash-attn = "on"\n')
    out = tmp_path / "tune"
    code, stdout, err = _tune(str(tune_pack), "--space", str(space), "--server-bin", str(dies_on_launch(tmp_path)),
                              "--out", str(out), "--json")
    assert code == 2, err
    last = err.strip().splitlines()[-1]  # progress lines come first on stderr
    assert last.startswith("servepack: error: tune measured nothing:") and f"kept in {out}" in last
    assert "exited with code 3" in last and stdout == ""
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert trials and {t["status"] for t in trials} == {"rejected"} and trials[0]["phase"] == "baseline"
    assert json.loads((out / "tune_result.json").read_text())["accepted"] == 0


def test_a_measured_tune_that_misses_its_ceiling_still_exits_0(tune_pack: Path, surface_bin: Path,
                                                               tmp_path: Path) -> None:
    space = write_space(tmp_path, '[tune]\nthreads = 8\nflash-attn = "on"\n')
    code, _, err = _tune(str(tune_pack), "--space", str(space), "--server-bin", str(surface_bin), "--out",
                         str(tmp_path / "tune"), "--max-ttft-ms", "0.001")
    assert code == 0, err  # measured: every trial was infeasible, which is a result, not a failure
