"""BFCL results shaped as the leaderboard reports them: per-category accuracy, its aggregates, streaming apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from servepack.smoke.bfcl import data as bfcl_data
from servepack.smoke.bfcl.leaderboard import SIZES, as_dict, leaderboard, rows
from servepack.smoke.codes import finding
from servepack.smoke.result import Attempt, CaseResult, SuiteResult, Verdict, case_result, wilson95


def _attempt(mode: str, ok: bool, *codes: str) -> Attempt:
    findings = [finding(c, c) for c in codes] or ([] if ok else [finding("BFCL_VALUE", "wrong")])
    return Attempt(mode=mode, request={}, response={}, duration_s=0.1,
                   verdict=Verdict(strict_pass=ok, lenient_pass=ok, findings=findings))


def _cases(category: str, passed: int, n: int) -> list[CaseResult]:
    return [case_result(f"{category}_{i}", category, "r", [_attempt("nonstream", i < passed)]) for i in range(n)]


def _suite(cases: list[CaseResult], name: str = "bfcl") -> SuiteResult:
    return SuiteResult.tally(cases=cases, repeat=1, suite=name, suite_version="bfcl-eval 2026.3.23", executed=False,
                             base_url="http://127.0.0.1:1", model="m", temperature=0.0,
                             started_at="2026-12-06T00:00:00.000Z", duration_s=1.0, runner_hash="0" * 64,
                             scorer_version="bfcl-ast 1.0")


COUNTS = {"simple_python": (3, 4), "simple_java": (1, 2), "simple_javascript": (2, 2), "multiple": (1, 1),
          "parallel": (0, 1), "parallel_multiple": (1, 2), "irrelevance": (2, 2), "live_simple": (1, 2),
          "live_multiple": (3, 4), "live_parallel": (0, 1), "live_parallel_multiple": (1, 1),
          "live_relevance": (1, 1), "live_irrelevance": (1, 2)}


def test_aggregates_are_computed_the_leaderboards_way() -> None:
    board = leaderboard(_suite([c for cat, (p, n) in COUNTS.items() for c in _cases(cat, p, n)]))
    agg = {a.name: a for a in board.aggregates}
    assert agg["non-live simple"].accuracy == pytest.approx((0.75 + 0.5 + 1.0) / 3)
    # Unweighted over its four parts, "simple" counting once (not by its 8 entries, not pooled).
    assert agg["non-live AST summary"].accuracy == pytest.approx((0.75 + 1.0 + 0.0 + 0.5) / 4)
    # Live: weighted by each category's size in the data (258, 1053, 16, 24), not by the entries run.
    live = (258 * 0.5 + 1053 * 0.75 + 16 * 0.0 + 24 * 1.0) / (258 + 1053 + 16 + 24)
    assert agg["live AST summary"].accuracy == pytest.approx(live)
    assert agg["irrelevance"].accuracy == pytest.approx((1.0 + 0.5) / 2)
    assert agg["relevance"].accuracy == pytest.approx(1.0)
    pooled = sum(p for p, _ in COUNTS.values()) / sum(n for _, n in COUNTS.values())
    assert agg["non-live AST summary"].accuracy != pytest.approx(pooled)
    for a in board.aggregates:
        assert a.interval is not None and a.interval[0] <= (a.accuracy or 0) <= a.interval[1]
    java = board.categories["simple_java"]
    assert (java.n, java.passed, java.size, java.interval) == (2, 1, 100, wilson95(1, 2)) and java.sampled


def test_an_aggregate_missing_a_category_is_not_given() -> None:
    board = leaderboard(_suite(_cases("simple_python", 3, 4) + _cases("simple", 1, 1), "bfcl-simple_python"))
    agg = {a.name: a for a in board.aggregates}
    assert agg["non-live simple"].accuracy is None
    assert agg["non-live simple"].missing == ("simple_java", "simple_javascript")
    # An earlier run's "simple" is simple_python.
    assert list(board.categories) == ["simple_python"] and board.categories["simple_python"].n == 5
    assert ["non-live simple", "n/a", "", "not run: simple_java, simple_javascript", ""] in rows(board)


def test_streamed_answers_are_reported_apart_not_folded_into_the_pass() -> None:
    same = case_result("multiple_0", "multiple", "r", [_attempt("nonstream", True), _attempt("stream", True)])
    differs = case_result("multiple_1", "multiple", "r",
                          [_attempt("nonstream", True), _attempt("stream", False, "STREAM_MISMATCH")])
    wrong = case_result("multiple_2", "multiple", "r", [_attempt("nonstream", False), _attempt("stream", True)])
    result = _suite([same, differs, wrong])
    assert result.strict_passed == 1  # the pooled count folds streaming in
    m = leaderboard(result).categories["multiple"]
    assert (m.passed, m.n) == (2, 3)  # the leaderboard's: first non-streamed answers
    assert (m.stream_compared, m.stream_same, m.stream_passed) == (3, 2, 2)
    shown = as_dict(leaderboard(result))["categories"]
    assert shown["multiple"]["accuracy"] == pytest.approx(0.6667)  # type: ignore[index]
    assert rows(leaderboard(result))[0][4] == "2/3 same decision, 2/3 pass"


@pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval not installed")
def test_category_sizes_are_those_of_the_installed_data() -> None:
    from servepack.smoke.bfcl import multi_turn

    sizes = {c: len(bfcl_data.load_category(c)) for c in bfcl_data.CATEGORIES}
    sizes |= {c: len(multi_turn.load_category(c)) for c in bfcl_data.MT_CATEGORIES}
    assert sizes == SIZES


def test_measured_md_shows_the_leaderboard_table(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "records"))
    from records_synth import make_run

    from servepack.packs import load_pack
    from servepack.report.measured import write_measured
    from servepack.store import ResultsDir

    pack = load_pack(None).pack
    root = tmp_path / pack.id
    cases = [c for cat, (p, n) in COUNTS.items() for c in _cases(cat, p, n)]
    cases.append(case_result("multiple_9", "multiple", "r",
                             [_attempt("nonstream", True), _attempt("stream", False, "STREAM_MISMATCH")]))
    ResultsDir(root / "b").write_json("bfcl.json", _suite(cases))
    run = make_run(root, "b")
    text = write_measured(run, pack).read_text()
    assert "BFCL `bfcl` as the leaderboard scores it" in text and "(`smoke run --full`)" in text
    lines = text.splitlines()
    java = next(line for line in lines if line.startswith("| simple_java |"))
    assert "| 50.0% |" in java and "2 of 100 (sample; --full for all)" in java
    row = next(line for line in lines if line.startswith("| bfcl v"))
    # The leaderboard's count (18: the streamed mismatch is not folded in), not the pooled 17.
    assert "**18/26 · 69%** non-streamed answers (BFCL table below) | 17/26 |" in row
    assert "**2/3 · 67%** |" in next(line for line in lines if line.startswith("| agent_smoke"))
    summary = next(line for line in lines if line.startswith("| non-live AST summary |"))
    assert "| 56.2% |" in summary or "| 56.3% |" in summary  # multiple: 2/2 (first answers) as 1/1 was


def test_the_report_shows_the_leaderboard_table_for_a_bfcl_suite_only(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "records"))
    from records_synth import make_run

    from servepack.packs import load_pack
    from servepack.report import write_report
    from servepack.store import ResultsDir

    pack = load_pack(None).pack
    root = tmp_path / pack.id
    cases = [c for cat, (p, n) in COUNTS.items() for c in _cases(cat, p, n)]
    cases.append(case_result("multiple_9", "multiple", "r",
                             [_attempt("nonstream", True), _attempt("stream", False, "STREAM_MISMATCH")]))
    ResultsDir(root / "b").write_json("bfcl.json", _suite(cases))
    page = write_report([make_run(root, "b")]).read_text()
    assert page.count("as the BFCL leaderboard scores it") == 1  # the BFCL suite's, not agent_smoke's
    assert "strict 18/26 non-streamed ·" in page and "strict 2/3 ·" in page
    assert "<td>non-live AST summary</td>" in page and "2 of 100 (sample; --full for all)" in page


def test_the_multi_turn_aggregate_is_the_unweighted_mean_and_skipped_entries_are_counted_apart() -> None:
    counts = {"multi_turn_base": (3, 4), "multi_turn_miss_func": (1, 2), "multi_turn_miss_param": (0, 1),
              "multi_turn_long_context": (1, 1)}
    suite = _suite([c for cat, (p, n) in counts.items() for c in _cases(cat, p, n)], "bfcl-multi_turn")
    suite = suite.model_copy(update={"skipped": {"multi_turn_base_7": "MathAPI needs mpmath",
                                                 "multi_turn_base_9": "MathAPI needs mpmath"}})
    board = leaderboard(suite)
    (multi,) = [a for a in board.aggregates if a.name == "multi-turn"]
    assert multi.accuracy == pytest.approx((0.75 + 0.5 + 0.0 + 1.0) / 4) and multi.how == "unweighted"
    base = board.categories["multi_turn_base"]
    assert (base.n, base.passed, base.skipped, base.size) == (4, 3, 2, 200)
    assert base.accuracy == 0.75  # over the entries run, not the skipped ones
    assert as_dict(board)["categories"]["multi_turn_base"]["skipped"] == 2  # type: ignore[index]
    row = next(r for r in rows(board) if r[0] == "multi_turn_base")
    assert row[3] == "4 of 200, 2 skipped (see skipped) (sample; --full for all)"
    # Every entry either run or skipped is not a sample.
    full = suite.model_copy(update={"skipped": {f"multi_turn_base_{i}": "x" for i in range(196)}})
    assert not leaderboard(full).categories["multi_turn_base"].sampled
    # No multi-turn category run: no multi-turn aggregate; one missing: not given.
    assert "multi-turn" not in {a.name for a in leaderboard(_suite(_cases("multiple", 1, 1))).aggregates}
    part = leaderboard(_suite(_cases("multi_turn_base", 1, 1), "bfcl-multi_turn_base"))
    (partial,) = [a for a in part.aggregates if a.name == "multi-turn"]
    assert partial.accuracy is None and partial.missing == ("multi_turn_miss_func", "multi_turn_miss_param",
                                                            "multi_turn_long_context")
