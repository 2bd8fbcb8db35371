"""Run a smoke suite against a served endpoint through the runner of its kind: the table of runners (`RUNNERS`:
Layer B, BFCL, the shipped case files; `runner_for`), and the case-file runner itself: every case in every mode (and
repeat), judged and recorded. What a runner is: `smoke.runners`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from servepack.engine.base import Endpoint
from servepack.errors import UsageError
from servepack.progress import Progress
from servepack.smoke.attempts import attempt_rounds, exchange_attempt
from servepack.smoke.cases import Case, Suite, load_suite, suite_names
from servepack.smoke.client import ChatClient, ChatExchange
from servepack.smoke.result import Attempt, CaseResult, SuiteResult, Verdict, case_result, check_run_options, run_cases
from servepack.smoke.runners import MODES, SuiteOptions, SuiteRunner
from servepack.smoke.scorer import (
    SCORER_VERSION,
    native_calls,
    score_message,
)
from servepack.store import ResultsDir


def score_response(case: Case, response_message: dict[str, Any]) -> Verdict:
    """Offline scoring of one recorded assistant message (or a whole chat-completion body)."""
    from servepack.smoke.scorer import score_recorded

    return score_recorded(case, response_message)


def runner_hash(suite: Suite) -> str:
    """sha256 over the suite's case files and the scorer version: what produced these verdicts."""
    return hashlib.sha256(f"{suite.files_sha256}\0scorer {SCORER_VERSION}".encode()).hexdigest()


def build_request(case: Case, model: str, *, temperature: float, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": case.messages,
        "temperature": temperature,
        "max_tokens": max_tokens,
    }
    if case.tools:
        body["tools"] = case.tools
    if case.tool_choice is not None:
        body["tool_choice"] = case.tool_choice
    if case.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = case.parallel_tool_calls
    return body


def decision(message: dict[str, Any]) -> Any:
    """What a mode decided: the calls (names and parsed arguments), or that it answered in text."""
    calls = []
    for c in native_calls(message):
        fn = c.get("function") or {}
        raw = fn.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = raw
        calls.append([fn.get("name"), args])
    if calls:
        return ["calls", calls]
    return ["text", bool((message.get("content") or "").strip()) if isinstance(message.get("content"), str) else False]


def _scorer(case: Case) -> Callable[[ChatExchange], Verdict]:
    return lambda ex: score_message(case, ex.message, finish_reason=ex.finish_reason)


def _attempt(case: Case, ex: ChatExchange, repeat_index: int) -> Attempt:
    return exchange_attempt(ex, repeat_index, _scorer(case))


def run_case(
    client: ChatClient, case: Case, model: str, *, temperature: float, max_tokens: int, repeat: int,
    modes: Sequence[str],
) -> CaseResult:
    request = build_request(case, model, temperature=temperature, max_tokens=max_tokens)
    attempts = attempt_rounds(client, request, repeat=repeat, modes=modes, score=_scorer(case), decide=decision)
    return case_result(case.id, case.category, case.rationale, attempts)


def run_suite(
    endpoint: Endpoint,
    suite: str,
    results: ResultsDir | None,
    *,
    temperature: float = 0.0,
    max_tokens: int = 512,
    repeat: int = 1,
    modes: tuple[str, ...] = MODES,
    progress: Progress | None = None,
    case_ids: Sequence[str] | None = None,
) -> SuiteResult:
    """Run one suite against an endpoint through the runner of its kind (`smoke.runners.runner_for`); return (and,
    with `results`, write `<suite>.json`) its SuiteResult."""
    options = SuiteOptions(temperature=temperature, max_tokens=max_tokens, repeat=repeat, modes=modes,
                           progress=progress, case_ids=case_ids)
    return runner_for(suite).run(endpoint.base_url, endpoint.model, suite, results, options)


def run_case_suite(base_url: str, model: str, suite: str, results: ResultsDir | None,
                   options: SuiteOptions) -> SuiteResult:
    """A suite of shipped case files: every case in every mode (and repeat), one response judged per case."""
    check_run_options(options.repeat, options.modes, MODES)
    loaded = load_suite(suite)
    selected = loaded.select(list(options.case_ids) if options.case_ids else None)
    with ChatClient(base_url) as client:
        return run_cases(
            suite, selected,
            lambda case: run_case(client, case, model, temperature=options.temperature,
                                  max_tokens=options.max_tokens, repeat=options.repeat, modes=options.modes),
            results, options.progress, suite_version=loaded.manifest.version, executed=False, base_url=base_url,
            model=model, temperature=options.temperature, repeat=options.repeat, runner_hash=runner_hash(loaded),
            scorer_version=SCORER_VERSION,
        )


class LayerBRunner:
    """Layer B: agent episodes executed against a sandboxed world (`smoke.layer_b`)."""

    def handles(self, suite: str) -> bool:
        return suite == "layer_b"

    def check(self, suite: str, case_ids: Sequence[str] | None) -> None:
        from servepack.smoke import sandbox
        from servepack.smoke.layer_b.cases import load_cases

        load_cases(case_ids)
        sandbox.require()

    def run(self, base_url: str, model: str, suite: str, results: ResultsDir | None,
            options: SuiteOptions) -> SuiteResult:
        from servepack.smoke.layer_b import run_layer_b  # imported only when asked for

        return run_layer_b(base_url, model, suite, results, options)


class BfclRunner:
    """The Berkeley Function Calling Leaderboard's categories, from the installed bfcl-eval data (`smoke.bfcl`)."""

    def handles(self, suite: str) -> bool:
        return suite == "bfcl" or suite.startswith(("bfcl:", "bfcl@"))

    def check(self, suite: str, case_ids: Sequence[str] | None) -> None:
        from servepack.smoke.bfcl.runner import suite_entries  # reads the bfcl-eval wheel

        suite_entries(suite, case_ids)

    def run(self, base_url: str, model: str, suite: str, results: ResultsDir | None,
            options: SuiteOptions) -> SuiteResult:
        from servepack.smoke.bfcl import run_bfcl_suite  # reads the wheel's data; only when asked for

        return run_bfcl_suite(base_url, model, suite, results, options)


class CaseFileRunner:
    """A suite shipped as JSON case files under `smoke/suites/<name>/`, one response judged per case."""

    def handles(self, suite: str) -> bool:
        return suite in suite_names()  # by the list, never a path: a long name or '../x' is no suite

    def check(self, suite: str, case_ids: Sequence[str] | None) -> None:
        load_suite(suite).select(list(case_ids) if case_ids else None)

    def run(self, base_url: str, model: str, suite: str, results: ResultsDir | None,
            options: SuiteOptions) -> SuiteResult:
        return run_case_suite(base_url, model, suite, results, options)


RUNNERS: list[SuiteRunner] = [LayerBRunner(), BfclRunner(), CaseFileRunner()]


def runner_for(suite: str) -> SuiteRunner:
    """The runner whose suite `suite` is; UsageError naming the suites there are when none is."""
    for runner in RUNNERS:
        if runner.handles(suite):
            return runner
    raise UsageError(f"no smoke suite {suite[:100]!r}; known: {', '.join(suite_names())} (check --suite)")
