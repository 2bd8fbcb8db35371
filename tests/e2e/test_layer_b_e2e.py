"""Layer B against the real embedded model: two executed episodes; the result file must be consistent."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.engine.base import Endpoint
from servepack.smoke.layer_b import run_layer_b
from servepack.smoke.result import SuiteResult
from servepack.smoke.runners import SuiteOptions
from servepack.store import ResultsDir

CASES = ["memory_store_pref", "cron_daily"]  # one small tool each: short prompts


@pytest.mark.e2e
def test_layer_b_subset_on_embedded_model(embedded_server: Endpoint, tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "layer_b")
    seen: list[str] = []
    res = run_layer_b(embedded_server.base_url, embedded_server.model, "layer_b", results,
                      SuiteOptions(max_tokens=96, modes=("nonstream",), case_ids=CASES, progress=seen.append),
                      max_steps=3)
    embedded_server.check_alive()
    written = SuiteResult.model_validate_json((tmp_path / "layer_b" / "layer_b.json").read_text())
    assert written.executed and written.n == res.n == len(CASES) == len(seen)
    assert [c.case_id for c in written.cases] == CASES
    assert 0 <= written.strict_passed <= written.lenient_passed <= written.n
    for case in written.cases:
        (attempt,) = case.attempts
        assert attempt.mode == "episode" and attempt.request["stream"] is False
        # The server answered every turn: whatever the model did, no transport failure.
        assert attempt.error is None, attempt.error
        assert not any(f.layer == "transport" for f in attempt.verdict.findings)
        response = attempt.response or {}
        assert 1 <= response["steps"] <= 3 and len(response["raw_responses"]) == response["steps"]
        assert all(r is not None and r["choices"] for r in response["raw_responses"])
        assert attempt.verdict.strict_pass == (not attempt.verdict.findings)
    assert written.failure_codes == {
        code: sum(code in c.codes for c in written.cases) for c in written.cases for code in c.codes
    }
