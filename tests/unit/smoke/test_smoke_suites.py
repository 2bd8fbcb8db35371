"""Self-tests of the shipped suites: counts, rationales, goldens pass strict, a do-nothing responder scores 0,
and every case's adversarial answers (plausible wrong answers written by hand) fail."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from servepack.smoke import scorer
from servepack.smoke.cases import Case, ExpectCode, ExpectToolCalls, load_suite, suite_names
from servepack.smoke.runner import build_request
from servepack.smoke.sandbox import SandboxResult
from servepack.smoke.scorer import score_message

SUITES = {"agent_smoke": (40, "2"), "hermes_agent_smoke": (27, "3")}
AGENT_CATEGORIES = ["tool_json", "multi_step", "error_repair", "no_invented", "short_code", "constraint_history"]
HERMES_CATEGORIES = ["terminal", "files", "web", "multi_tool", "multi_turn", "error_repair", "no_invented",
                     "browser", "memory_cron", "args_strict", "safety"]
HERMES_TOOLS = {"terminal", "read_file", "write_file", "patch", "search_files", "web_search", "web_extract",
                "browser_navigate", "browser_click", "browser_type", "memory", "cronjob"}


def trusted_run(code: str, *, timeout_s: float = 10.0) -> SandboxResult:
    """Runs trusted golden code without the sandbox, so these unit tests do not depend on its isolation."""
    p = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=timeout_s)
    return SandboxResult(p.stdout, p.stderr, p.returncode, False, None, None)


@pytest.fixture(autouse=True)
def _trusted_sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import servepack.smoke.sandbox as sandbox

    monkeypatch.setattr(sandbox, "run_python", trusted_run)
    scorer._run_code.cache_clear()
    yield
    scorer._run_code.cache_clear()


def all_cases() -> list[Case]:
    return [c for name in SUITES for c in load_suite(name).cases]


def test_suites_have_the_seed_counts_and_categories() -> None:
    assert set(SUITES) <= set(suite_names())
    for name, (count, version) in SUITES.items():
        suite = load_suite(name)
        assert len(suite.cases) == count
        assert suite.manifest.version == version
    assert load_suite("agent_smoke").manifest.categories == AGENT_CATEGORIES
    assert load_suite("hermes_agent_smoke").manifest.categories == HERMES_CATEGORIES
    for name in SUITES:
        cats = {c.category for c in load_suite(name).cases}
        assert cats == set(load_suite(name).manifest.categories)


def test_hermes_suite_offers_every_hermes_tool_somewhere() -> None:
    offered = {n for c in load_suite("hermes_agent_smoke").cases for n in c.tool_names}
    assert offered == HERMES_TOOLS


def test_every_case_has_a_one_line_rationale_and_unique_id() -> None:
    cases = all_cases()
    ids = [f"{c.suite}/{c.id}" for c in cases]
    assert len(ids) == len(set(ids))
    for c in cases:
        assert c.rationale.startswith("Catches"), c.id
        assert "\n" not in c.rationale


def test_files_hash_is_stable() -> None:
    assert load_suite("agent_smoke").files_sha256 == load_suite("agent_smoke").files_sha256
    assert load_suite("agent_smoke").files_sha256 != load_suite("hermes_agent_smoke").files_sha256


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: f"{c.suite}/{c.id}")
def test_golden_passes_strict(case: Case) -> None:
    verdict = score_message(case, case.golden)
    assert verdict.codes == []
    assert verdict.strict_pass and verdict.lenient_pass


@pytest.mark.parametrize("text", ["", "OK, I will do that.", "Done! Let me know if you need anything else."])
def test_do_nothing_responder_scores_zero_on_action_cases(text: str) -> None:
    action_cases = [c for c in all_cases() if c.expects_action]
    assert len(action_cases) >= 50
    passed = [c.id for c in action_cases if score_message(c, {"role": "assistant", "content": text}).lenient_pass]
    assert passed == []


def test_echoing_the_user_fails_every_case_with_a_content_check() -> None:
    # The do-nothing responder for answer cases: repeating the question must not satisfy the content regex.
    checked = 0
    for c in all_cases():
        if c.expects_action or c.expect.kind != "no_tool_call" or not c.expect.content_regex:
            continue
        echo = {"role": "assistant", "content": "Okay."}
        assert not score_message(c, echo).strict_pass, c.id
        checked += 1
    assert checked >= 12


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: f"{c.suite}/{c.id}")
def test_adversarial_answers_fail(case: Case) -> None:
    assert case.adversarial, "every case ships at least one plausible wrong answer"
    for adv in case.adversarial:
        assert adv.message != case.golden
        v = score_message(case, adv.message)
        assert not v.strict_pass, f"{adv.why}: passed strict"
        if adv.fails == "both":
            assert not v.lenient_pass, f"{adv.why}: passed lenient ({v.codes})"
        else:  # a wire-format fault only: a forgiving runtime would take it, and the lenient list must say so
            assert v.lenient_pass and all(f.lenient_ok for f in v.findings), f"{adv.why}: {v.codes}"


def test_adversarial_answers_cover_keyword_and_structure_holes() -> None:
    cases = all_cases()
    answers = [(c, a) for c in cases for a in c.adversarial]
    assert len(answers) >= 95
    # Cases judged on prose carry a wrong answer that uses the case's own keywords (apology, agreement).
    prose = [c for c in cases if c.expect.kind == "no_tool_call"]
    assert all(any(a.message.get("content") for a in c.adversarial) for c in prose)
    assert {a.fails for _, a in answers} == {"both", "strict"}


def test_rewritten_cases_say_what_decides_them() -> None:
    rewritten = [c for c in all_cases() if c.version > 1]
    assert len(rewritten) >= 20
    for c in rewritten:
        assert "decided by" in c.rationale, c.id
    # Every prose case judged on refusals also forbids claiming the action it refuses.
    for c in all_cases():
        if c.category == "no_invented" and c.expect.kind == "no_tool_call" and "tool|way|access" in (
                c.expect.content_regex or ""):
            assert c.expect.content_not_regex, c.id


def test_code_cases_name_a_driver_and_exact_stdout() -> None:
    code_cases = [c for c in all_cases() if isinstance(c.expect, ExpectCode)]
    assert len(code_cases) == 6
    for c in code_cases:
        assert isinstance(c.expect, ExpectCode)
        assert c.expect.stdout.endswith("\n") and c.expect.driver.strip()
        assert c.tools == []


def test_cases_expecting_several_calls_ask_for_parallel_calls() -> None:
    multi = [c for c in all_cases() if isinstance(c.expect, ExpectToolCalls) and len(c.expect.calls) > 1]
    assert len(multi) == 3
    assert all(c.parallel_tool_calls is True for c in multi)
    assert build_request(multi[0], "m", temperature=0.0, max_tokens=64)["parallel_tool_calls"] is True
    single = load_suite("agent_smoke").cases[0]
    assert "parallel_tool_calls" not in build_request(single, "m", temperature=0.0, max_tokens=64)


@pytest.mark.parametrize("name", ["a" * 5000, "../suites/agent_smoke", "agent_smoke/../agent_smoke", "",
                                  "agent_smoke\x00", "/", ".", "..", "AGENT_SMOKE", "agent_smoke/"])
def test_load_suite_called_directly_refuses_a_name_that_is_no_suite_in_one_line(name: str) -> None:
    """Issue 35: a name is looked up in the shipped list, never used as a path. The wrong answers: a name of 5,000
    characters raised OSError (ENAMETOOLONG) where a path was built from it, so a caller other than the CLI's check
    (a recorded suite being rescored) got a traceback; a path such as '../suites/agent_smoke' loaded."""
    from servepack.errors import UsageError

    with pytest.raises(UsageError) as info:
        load_suite(name)
    line = str(info.value)
    assert "\n" not in line and line.startswith("no smoke suite") and len(line) < 400
    assert f"known: {', '.join(suite_names())}" in line
    assert len(load_suite("agent_smoke").cases) == SUITES["agent_smoke"][0]  # a real name still loads
