"""compare BASE CANDIDATE: ratio of medians with a bootstrap CI and the pack's promotion rule, on synthetic samples.
(A run against a record: tests/unit/reproduce/test_judgement.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from records_synth import make_run

from servepack.errors import UsageError
from servepack.packs import load_pack
from servepack.records.compare import compare_runs, ratio_ci, verdict

PACK = load_pack(None).pack
BASE = (36.0, 36.4, 35.7, 36.1, 35.9)
PREFILL = (160.0, 158.0, 162.0, 161.0, 159.0)


def _pair(tmp_path: Path, decode: tuple[float, ...], prefill: tuple[float, ...]) -> tuple[Path, Path]:
    base = make_run(tmp_path, "base", decode=BASE, prefill=PREFILL, smoke=None)
    cand = make_run(tmp_path, "cand", preset="spec-ngram", decode=decode, prefill=prefill, smoke=None)
    return base, cand


def test_ratio_ci_brackets_the_ratio_and_is_reproducible() -> None:
    ci = ratio_ci([10.0, 11.0, 9.0, 10.5], [20.0, 21.0, 19.0, 20.5])
    assert ci.ratio == pytest.approx(2.0, rel=0.03)
    assert ci.low <= ci.ratio <= ci.high and ci.low > 1.5
    assert ratio_ci([10.0, 11.0, 9.0, 10.5], [20.0, 21.0, 19.0, 20.5]) == ci


def test_verdict_direction_depends_on_the_metric() -> None:
    faster = ratio_ci([10.0, 10.1, 9.9], [12.0, 12.1, 11.9])
    assert verdict("decode_tok_s", faster) == "better"
    assert verdict("ttft_ms", faster) == "worse"
    assert verdict("decode_tok_s", None) == "no samples"


def test_clearly_better_promotes(tmp_path: Path) -> None:
    base, cand = _pair(tmp_path, tuple(d * 1.3 for d in BASE), tuple(p * 1.2 for p in PREFILL))
    cmp = compare_runs(base, cand, PACK)
    assert cmp.decision == "PROMOTE"
    assert len(cmp.reasons) == 4  # two cells × two promotion metrics
    assert all(": better, ×" in r for r in cmp.reasons)
    assert "preset: default (baseline) vs spec-ngram (candidate)" in cmp.differences


def test_clearly_worse_on_one_metric_does_not_promote(tmp_path: Path) -> None:
    base, cand = _pair(tmp_path, tuple(d * 0.7 for d in BASE), tuple(p * 1.2 for p in PREFILL))
    cmp = compare_runs(base, cand, PACK)
    assert cmp.decision == "DO_NOT_PROMOTE"
    assert all("decode_tok_s (server): worse" in r for r in cmp.reasons)
    assert len(cmp.reasons) == 2


def test_overlapping_samples_are_inconclusive(tmp_path: Path) -> None:
    base, cand = _pair(tmp_path, (36.3, 35.6, 36.0, 35.8, 36.5), (159.0, 162.0, 158.0, 161.0, 160.0))
    cmp = compare_runs(base, cand, PACK)
    assert cmp.decision == "INCONCLUSIVE"
    assert any("within noise" in r for r in cmp.reasons)
    assert cmp.reasons[-1].startswith("PROMOTE needs every promotion metric better")
    ttft = [m for m in cmp.metrics if m.metric == "ttft_ms"]
    assert ttft and not any(m.promotion for m in ttft)


def test_no_shared_cell_is_a_usage_error(tmp_path: Path) -> None:
    base = make_run(tmp_path, "base", marks=(256,), smoke=None)
    cand = make_run(tmp_path, "cand", marks=(512,), smoke=None)
    with pytest.raises(UsageError, match="no bench cell in common"):
        compare_runs(base, cand, PACK)
