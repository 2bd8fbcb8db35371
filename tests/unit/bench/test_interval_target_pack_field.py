"""`claims.interval_target_pct`: a percentage above 0 and at most 100, refused in one line otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.bench.config import BenchSettings
from servepack.cli.main import cli
from servepack.packs import load_pack_file, shipped_pack_paths

QWEN = "qwen2.5-coder-0.5b-cpu"
ANCHOR = "noise_floor_gen_tokens = 8\n"


def _pack(tmp_path: Path, line: str) -> Path:
    text = shipped_pack_paths()[QWEN].read_text()
    assert ANCHOR in text
    f = tmp_path / "pack.toml"
    f.write_text(text.replace(ANCHOR, ANCHOR + line, 1))
    return f


@pytest.mark.parametrize("value", ["0", "-3", "101", "nan", "inf", '"three"', "[3]"])
def test_a_bad_interval_target_fails_validation_in_one_line(tmp_path: Path, value: str) -> None:
    result = CliRunner().invoke(cli, ["pack", "validate", str(_pack(tmp_path, f"interval_target_pct = {value}\n"))])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "interval_target_pct" in lines[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize(("value", "expect"), [("0.5", 0.5), ("3", 3.0), ("100", 100.0)])
def test_a_good_interval_target_reaches_the_bench(tmp_path: Path, value: str, expect: float) -> None:
    pack = load_pack_file(_pack(tmp_path, f"interval_target_pct = {value}\n")).pack
    assert pack.claims.interval_target_pct == expect
    s = BenchSettings.from_plan(pack.bench, pack.claims)
    assert s.interval_target_pct == expect and s.interval_metric == "decode_tok_s_server"
    assert (s.samples, s.max_samples) == (3, 20)  # the pack's count is the sequential rule's minimum


def test_the_default_target_is_three_percent_and_an_explicit_count_is_fixed() -> None:
    pack = load_pack_file(shipped_pack_paths()[QWEN]).pack
    assert pack.claims.interval_target_pct == 3.0
    fixed = BenchSettings.from_plan(pack.bench, pack.claims, samples=7)
    assert (fixed.samples, fixed.max_samples) == (7, 7)
