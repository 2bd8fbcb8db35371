"""agent_smoke against the real embedded model: a few cases, small max_tokens; the file and counts must add up."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepack.engine.base import Endpoint
from servepack.smoke.result import SuiteResult
from servepack.smoke.runner import run_suite
from servepack.store import ResultsDir

# Short answers only: on 2 CPU cores every generated token counts.
CASES = ["tool_json.weather_city", "no_invented.arithmetic_directly", "multi_step.answer_after_result"]


@pytest.mark.e2e
def test_agent_smoke_subset_on_embedded_model(embedded_server: Endpoint, tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "smoke")
    seen: list[str] = []
    res = run_suite(embedded_server, "agent_smoke", results,
                    max_tokens=128, case_ids=CASES, progress=seen.append)
    embedded_server.check_alive()
    written = SuiteResult.model_validate_json((tmp_path / "smoke" / "agent_smoke.json").read_text())
    assert written.n == res.n == len(CASES) == len(seen)
    assert [c.case_id for c in written.cases] == CASES
    assert 0 <= written.strict_passed <= written.lenient_passed <= written.n
    assert written.strict_passed == sum(c.strict_pass for c in written.cases)
    assert sum(cat.n for cat in written.categories.values()) == written.n
    for case in written.cases:
        assert [a.mode for a in case.attempts] == ["nonstream", "stream"]
        for a in case.attempts:
            # The server answered: whatever the model did, no transport failure.
            assert a.error is None and a.response is not None, a.error
            assert not any(f.layer == "transport" and f.code != "TRANSPORT_TRUNCATED" for f in a.verdict.findings)
        assert set(case.codes) == {code for a in case.attempts for code in a.verdict.codes}
    codes_total = {code: sum(code in c.codes for c in written.cases) for c in written.cases for code in c.codes}
    assert written.failure_codes == codes_total
