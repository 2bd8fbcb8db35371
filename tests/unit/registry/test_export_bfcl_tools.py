"""The registry export's capabilities.tools counts a BFCL suite as the leaderboard scores it (each entry's first
non-streamed answer) and carries the leaderboard's aggregates in its note; a suite of case files keeps the strict
count (every mode must pass)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from servepack.registry.export.export import tools_capability
from servepack.smoke.codes import finding
from servepack.smoke.result import Attempt, CaseResult, SuiteResult, Verdict, case_result

PROV: dict[str, Any] = {"source": "servepack", "run": "r"}


def _attempt(mode: str, ok: bool) -> Attempt:
    return Attempt(mode=mode, request={}, response={}, duration_s=0.1,
                   verdict=Verdict(strict_pass=ok, lenient_pass=ok,
                                   findings=[] if ok else [finding("BFCL_VALUE", "wrong")]))


def _case(cid: str, category: str, nonstream_ok: bool, stream_ok: bool) -> CaseResult:
    return case_result(cid, category, "r", [_attempt("nonstream", nonstream_ok), _attempt("stream", stream_ok)])


def _suite(cases: list[CaseResult], name: str) -> SuiteResult:
    return SuiteResult.tally(cases=cases, repeat=1, suite=name, suite_version="v", executed=False,
                             base_url="http://127.0.0.1:1", model="m", temperature=0.0,
                             started_at="2026-12-06T00:00:00.000Z", duration_s=1.0, runner_hash="0" * 64,
                             scorer_version="s")


def _view(*suites: SuiteResult) -> Any:
    return SimpleNamespace(smoke=[(Path(f"{s.suite}.json"), s) for s in suites])


def test_a_bfcl_suite_counts_first_non_streamed_answers_and_states_its_aggregates() -> None:
    # 3 of 4 non-streamed answers pass, but every streamed one fails: strict (both modes) would count 0 of 4
    cases = [_case(f"simple_python_{i}", "simple_python", i < 3, False) for i in range(4)]
    bfcl = _suite(cases, "bfcl-simple_python")
    assert bfcl.strict_passed == 0  # the pooled strict count the export used to take
    ok, fact = tools_capability(_view(bfcl), PROV)
    assert ok is True  # 3/4 ≥ 50%: the leaderboard's count, not the pooled strict 0/4
    assert "3/4 first non-streamed answers pass as the BFCL leaderboard scores them" in fact["note"]
    assert "a sample per category" in fact["note"]


def test_case_file_suites_keep_the_strict_count() -> None:
    cases = [_case(f"c{i}", "tools", i < 3, False) for i in range(4)]
    ok, fact = tools_capability(_view(_suite(cases, "agent_smoke")), PROV)
    assert ok is False and "agent_smoke 0/4 strict" in fact["note"]


def test_no_smoke_run_is_unknown() -> None:
    ok, fact = tools_capability(_view(), PROV)
    assert ok is None and fact["state"] == "unknown"
