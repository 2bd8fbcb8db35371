"""Result records shared by every smoke suite (one-response and executed): verdicts, cases, suites."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from pydantic import Field

from servepack.errors import UsageError
from servepack.store import ResultsDir, rfc3339, utc_now
from servepack.strict import Strict

C = TypeVar("C")

SMOKE_SCHEMA_VERSION: Literal["servepack.smoke/v1"] = "servepack.smoke/v1"

Layer = Literal["transport", "extraction", "schema", "semantics", "stream", "sandbox", "end_state"]


class Finding(Strict):
    """One failed check: a stable code, the layer it belongs to, and a human sentence."""

    code: str = Field(description="stable, e.g. EXTRACTION_CALL_IN_CONTENT, SCHEMA_TYPE, SEM_WRONG_TOOL")
    layer: Layer
    message: str
    lenient_ok: bool = Field(False, description="a forgiving agent runtime would accept this")


class Verdict(Strict):
    """The layered judgement of one response (or one executed episode)."""

    strict_pass: bool
    lenient_pass: bool
    findings: list[Finding] = Field(default_factory=list)

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.findings]


class Attempt(Strict):
    """One request/response of a case in one mode (non-streamed or streamed), with its verdict."""

    mode: Literal["nonstream", "stream", "episode"]
    repeat_index: int = 0
    request: dict[str, Any]
    response: dict[str, Any] | None = Field(description="raw response body, or the reassembled stream")
    error: str | None = None
    duration_s: float
    verdict: Verdict


class CaseResult(Strict):
    case_id: str
    category: str
    rationale: str
    attempts: list[Attempt]
    strict_pass: bool = Field(description="every attempt passed strict (pass^k over modes and repeats)")
    lenient_pass: bool
    codes: list[str] = Field(description="distinct finding codes over all attempts")


def case_result(case_id: str, category: str, rationale: str, attempts: list[Attempt]) -> CaseResult:
    """A case's result from its attempts: it passes only if every attempt passed (pass^k over modes, repeats)."""
    return CaseResult(
        case_id=case_id,
        category=category,
        rationale=rationale,
        attempts=attempts,
        strict_pass=all(a.verdict.strict_pass for a in attempts),
        lenient_pass=all(a.verdict.lenient_pass for a in attempts),
        codes=list(dict.fromkeys(code for a in attempts for code in a.verdict.codes)),
    )


def check_run_options(repeat: int, modes: Sequence[str], allowed: Sequence[str]) -> None:
    """The options every suite runner takes, checked once: a UsageError names the fix."""
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: must be at least 1")
    if not modes or any(m not in allowed for m in modes):
        raise UsageError(f"modes {list(modes)}: choose from {list(allowed)}")


class CategoryScore(Strict):
    n: int
    strict_passed: int
    lenient_passed: int
    flake_rate: float | None = Field(None, description="share of cases whose repeats disagreed (repeat > 1)")
    pass_k_wilson95: tuple[float, float] | None = Field(None, description="Wilson 95% interval of pass^k")


class SuiteResult(Strict):
    """What `<suite>.json` holds."""

    schema_version: Literal["servepack.smoke/v1"] = SMOKE_SCHEMA_VERSION
    suite: str
    suite_version: str
    executed: bool = Field(description="tools were executed in a sandbox (layer_b), not only validated")
    base_url: str
    model: str
    temperature: float
    repeat: int
    started_at: str
    duration_s: float
    runner_hash: str = Field(description="sha256 over the suite's case files and the scorer version")
    scorer_version: str
    n: int
    strict_passed: int
    lenient_passed: int
    categories: dict[str, CategoryScore]
    failure_codes: dict[str, int] = Field(description="finding code → number of cases it occurred in")
    cases: list[CaseResult]
    skipped: dict[str, str] = Field(default_factory=dict, description="case id → why it was not run (a BFCL "
                                    "multi-turn backend needing a package servepack does not carry)")

    @classmethod
    def tally(cls, *, cases: list[CaseResult], repeat: int, **header: Any) -> SuiteResult:
        """A suite result whose counts, categories and failure codes are computed from its cases."""
        codes = Counter(code for c in cases for code in c.codes)
        return cls(
            **header, repeat=repeat, n=len(cases), strict_passed=sum(c.strict_pass for c in cases),
            lenient_passed=sum(c.lenient_pass for c in cases), categories=summarize_categories(cases, repeat),
            failure_codes=dict(codes.most_common()), cases=cases,
        )


def wilson95(successes: int, n: int) -> tuple[float, float]:
    """Wilson score interval (z = 1.96) for a binomial proportion."""
    if n <= 0:
        return (0.0, 1.0)
    z = 1.959963984540054
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (round(max(0.0, centre - half), 6), round(min(1.0, centre + half), 6))


def summarize_categories(cases: Sequence[CaseResult], repeat: int) -> dict[str, CategoryScore]:
    groups: dict[str, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault(c.category, []).append(c)
    out: dict[str, CategoryScore] = {}
    for name, group in groups.items():
        strict = sum(c.strict_pass for c in group)
        flake = None
        if repeat > 1:
            # A case flakes when its repeats (any mode) disagree on strict pass.
            def rounds(c: CaseResult) -> set[bool]:
                per: dict[int, bool] = {}
                for a in c.attempts:
                    per[a.repeat_index] = per.get(a.repeat_index, True) and a.verdict.strict_pass
                return set(per.values())

            flake = round(sum(len(rounds(c)) > 1 for c in group) / len(group), 6)
        out[name] = CategoryScore(
            n=len(group),
            strict_passed=strict,
            lenient_passed=sum(c.lenient_pass for c in group),
            flake_rate=flake,
            pass_k_wilson95=wilson95(strict, len(group)),
        )
    return out


def run_cases(
    suite: str,
    cases: Sequence[C],
    run_one: Callable[[C], CaseResult],
    results: ResultsDir | None,
    progress: Callable[[str], None] | None,
    **header: Any,
) -> SuiteResult:
    """Run every case in order, appending each to `<suite>.cases.jsonl` as it ends; tally and write `<suite>.json`.

    `header` carries the SuiteResult fields the runner knows (suite_version, executed, base_url, model,
    temperature, repeat, runner_hash, scorer_version).
    """
    started, t0 = utc_now(), time.perf_counter()
    done: list[CaseResult] = []
    log = results.jsonl(f"{suite}.cases.jsonl") if results else None
    try:
        for i, case in enumerate(cases, 1):
            res = run_one(case)
            done.append(res)
            if log:
                log.write(res)
            if progress:
                mark = "pass" if res.strict_pass else ("lenient" if res.lenient_pass else "FAIL")
                progress(f"{suite} {i}/{len(cases)} {res.case_id}: {mark} {' '.join(res.codes)}".rstrip())
    finally:
        if log:
            log.close()
    out = SuiteResult.tally(suite=suite, started_at=rfc3339(started), duration_s=round(time.perf_counter() - t0, 3),
                            cases=done, **header)
    if results is not None:
        results.write_json(f"{suite}.json", out)
    return out
