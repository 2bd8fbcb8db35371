"""Run a smoke suite against a served endpoint: every case in every mode (and repeat), judged and recorded."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from servepack.engine.base import Endpoint
from servepack.progress import Progress
from servepack.smoke.attempts import attempt_rounds, exchange_attempt
from servepack.smoke.cases import Case, Suite, load_suite
from servepack.smoke.client import ChatClient, Exchange
from servepack.smoke.result import Attempt, CaseResult, SuiteResult, Verdict, case_result, check_run_options, run_cases
from servepack.smoke.scorer import (
    SCORER_VERSION,
    native_calls,
    score_message,
)
from servepack.store import ResultsDir

MODES = ("nonstream", "stream")


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


def _scorer(case: Case) -> Callable[[Exchange], Verdict]:
    return lambda ex: score_message(case, ex.message, finish_reason=ex.finish_reason)


def _attempt(case: Case, ex: Exchange, repeat_index: int) -> Attempt:
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
    """Run one suite against an endpoint; return (and, with `results`, write `<suite>.json`) its SuiteResult."""
    base_url, model = endpoint.base_url, endpoint.model
    if suite == "layer_b":
        from servepack.smoke.layer_b import run_layer_b  # built alongside; imported only when asked for

        return run_layer_b(
            base_url, model, suite, results, temperature=temperature, max_tokens=max_tokens, repeat=repeat,
            modes=modes, progress=progress, case_ids=case_ids,
        )
    if suite == "bfcl" or suite.startswith(("bfcl:", "bfcl@")):
        from servepack.smoke.bfcl import run_bfcl_suite  # reads the bfcl-eval wheel's data; only when asked for

        return run_bfcl_suite(base_url, model, suite, results, temperature=temperature, max_tokens=max_tokens,
                              repeat=repeat, modes=modes, progress=progress, case_ids=case_ids)
    check_run_options(repeat, modes, MODES)
    loaded = load_suite(suite)
    selected = loaded.select(list(case_ids) if case_ids else None)
    with ChatClient(base_url) as client:
        return run_cases(
            suite, selected,
            lambda case: run_case(client, case, model, temperature=temperature, max_tokens=max_tokens,
                                  repeat=repeat, modes=modes),
            results, progress, suite_version=loaded.manifest.version, executed=False, base_url=base_url,
            model=model, temperature=temperature, repeat=repeat, runner_hash=runner_hash(loaded),
            scorer_version=SCORER_VERSION,
        )
