"""Runs the Layer B suite against a server: one executed episode per case, mode and repeat."""

from __future__ import annotations

import hashlib
from typing import Any

from servepack.errors import UsageError
from servepack.smoke import sandbox
from servepack.smoke.client import ChatClient
from servepack.smoke.layer_b.cases import SUITE, SUITE_VERSION, LayerBCase, load_cases
from servepack.smoke.layer_b.episode import Episode, HttpResponder, Responder, run_episode
from servepack.smoke.layer_b.judge import JUDGE_VERSION, end_state, finding, judge
from servepack.smoke.layer_b.tools import DEFAULT_SHELL
from servepack.smoke.layer_b.world import World
from servepack.smoke.result import Attempt, CaseResult, SuiteResult, Verdict, case_result, check_run_options, run_cases
from servepack.smoke.runners import SuiteOptions
from servepack.store import ResultsDir

MODES = ("nonstream", "stream")


def run_case_episode(case: LayerBCase, responder: Responder) -> tuple[Episode, Verdict, dict[str, Any]]:
    """One episode in a fresh world, judged before the world is removed; also its end-state snapshot."""
    world = World.create(case.world, default_shell=DEFAULT_SHELL)
    try:
        episode = run_episode(case, world, responder)
        return episode, judge(case, world, episode), end_state(world)
    finally:
        world.close()


def _with_mismatch(verdict: Verdict) -> Verdict:
    extra = finding("STREAM_EPISODE_MISMATCH", "the streamed episode made other tool calls", lenient_ok=True)
    return Verdict(strict_pass=False, lenient_pass=verdict.lenient_pass, findings=[*verdict.findings, extra])


def _attempt(stream: bool, repeat_index: int, episode: Episode, verdict: Verdict, snapshot: dict[str, Any],
             request: dict[str, Any]) -> Attempt:  # fmt: skip
    response = {"transcript": episode.messages, "raw_responses": episode.responses, "end_state": snapshot,
                "final_answer": episode.final_answer, "steps": episode.steps}  # fmt: skip
    return Attempt(
        mode="episode",
        repeat_index=repeat_index,
        request={**request, "stream": stream},
        response=response,
        error=episode.error,
        duration_s=round(episode.duration_s, 3),
        verdict=verdict,
    )


def runner_hash(files_sha256: str) -> str:
    return hashlib.sha256(f"{files_sha256}\0judge {JUDGE_VERSION}".encode()).hexdigest()


def run_layer_b(base_url: str, model: str, suite: str, results: ResultsDir | None, options: SuiteOptions, *,
                max_steps: int | None = None) -> SuiteResult:
    """Run Layer B with `options` (its sampling, repeats, modes, progress and cases); each entry of `options.modes`
    is a whole episode whose model calls are all streamed or not.

    `max_steps` caps every case's own step limit (quick runs); the golden scripts may then not fit.
    """
    if suite != SUITE:
        raise UsageError(f"run_layer_b runs suite {SUITE!r}, not {suite!r}")
    sandbox.require()  # executed tools without real isolation: refuse before the first episode
    o = options
    check_run_options(o.repeat, o.modes, MODES)
    cases, files_sha = load_cases(o.case_ids)
    if max_steps is not None:
        cases = [c.model_copy(update={"max_steps": min(c.max_steps, max_steps)}) for c in cases]
    with ChatClient(base_url) as client:
        return run_cases(
            SUITE, cases, lambda case: _run_case(client, case, model, o.temperature, o.max_tokens, o.repeat, o.modes),
            results, o.progress, suite_version=SUITE_VERSION, executed=True, base_url=base_url, model=model,
            temperature=o.temperature, repeat=o.repeat, runner_hash=runner_hash(files_sha),
            scorer_version=JUDGE_VERSION,
        )


def _run_case(client: ChatClient, case: LayerBCase, model: str, temperature: float, max_tokens: int,
              repeat: int, modes: tuple[str, ...]) -> CaseResult:  # fmt: skip
    attempts: list[Attempt] = []
    request = {"model": model, "temperature": temperature, "max_tokens": max_tokens, "tools": case.tools,
               "messages": case.messages, "max_steps": case.max_steps}  # fmt: skip
    for r in range(repeat):
        runs = []
        for mode in modes:
            stream = mode == "stream"
            responder = HttpResponder(client, model, temperature=temperature, max_tokens=max_tokens, stream=stream)
            runs.append((stream, *run_case_episode(case, responder)))
        mismatch = len({tuple(ep.calls) for _, ep, _, _ in runs if ep.error is None}) > 1
        for stream, episode, verdict, snapshot in runs:
            verdict = _with_mismatch(verdict) if mismatch and stream else verdict
            attempts.append(_attempt(stream, r, episode, verdict, snapshot, request))
    return case_result(case.id, case.category, case.rationale, attempts)
