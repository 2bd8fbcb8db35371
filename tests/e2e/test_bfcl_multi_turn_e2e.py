"""BFCL multi-turn against the real embedded model: a two-turn conversation whose calls run in the sandbox; the
real server must accept the conversation as the driver builds it (tool results, then the next user turn)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from servepack.engine.base import Endpoint
from servepack.smoke import sandbox
from servepack.smoke.bfcl.runner import run_bfcl_suite
from servepack.smoke.result import SuiteResult
from servepack.smoke.runners import SuiteOptions
from servepack.store import ResultsDir

ENTRY = "multi_turn_base_100"  # two turns, one backend (TradingBot): the shortest prompt of a two-turn entry


@pytest.mark.e2e
def test_a_multi_turn_entry_on_the_embedded_model(embedded_server: Endpoint, tmp_path: Path) -> None:
    if importlib.util.find_spec("bfcl_eval") is None:
        from system_deps import missing

        missing("BFCL's data is not installed", "pip install --no-deps bfcl-eval==2026.3.23, as make does")
    if sandbox.isolation().mode == "none":
        pytest.skip(f"no sandbox on this machine: {sandbox.isolation().reason}")
    res = run_bfcl_suite(embedded_server.base_url, embedded_server.model, "bfcl:multi_turn_base", ResultsDir(tmp_path),
                         SuiteOptions(max_tokens=128, modes=("nonstream",), case_ids=[ENTRY]))
    embedded_server.check_alive()
    written = SuiteResult.model_validate_json((tmp_path / f"{res.suite}.json").read_text())
    (case,) = written.cases
    (attempt,) = case.attempts
    # Whatever the model did, the server answered every round: no transport failure, no backend failure.
    assert attempt.error is None, attempt.error
    assert not any(f.layer in ("transport", "sandbox") for f in attempt.verdict.findings), attempt.verdict.findings
    turns = (attempt.response or {})["turns"]
    assert 1 <= len(turns) <= 2 and all(turns)
    executed = [s for t in turns for s in t if "results" in s]
    assert all(len(s["results"]) == len(s["message"]["tool_calls"]) for s in executed)
    assert attempt.verdict.strict_pass == (not attempt.verdict.findings)
