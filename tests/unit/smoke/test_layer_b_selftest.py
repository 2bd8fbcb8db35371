"""Layer B self-tests: every golden script passes strict, a do-nothing responder fails, the judge's codes."""

from __future__ import annotations

from typing import Any

import pytest

from servepack.smoke.layer_b.cases import CATEGORIES, GoldenTurn, LayerBCase, load_cases
from servepack.smoke.layer_b.episode import Reply, ScriptedResponder, TextResponder
from servepack.smoke.layer_b.runner import run_case_episode

CASES, _SHA = load_cases()
BY_ID = {c.id: c for c in CASES}


def test_suite_shape() -> None:
    assert len(CASES) == 35
    assert {c.category for c in CASES} == set(CATEGORIES)
    assert all(c.suite == "layer_b" and c.version == "3" and c.rationale for c in CASES)
    assert len(_SHA) == 64


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden_script_passes_strict(case: LayerBCase) -> None:
    episode, verdict, snapshot = run_case_episode(case, ScriptedResponder(case.golden))
    assert verdict.findings == []
    assert verdict.strict_pass and verdict.lenient_pass
    assert episode.final_answer == case.golden[-1].content
    assert len(snapshot["events"]) == sum(len(t.tool_calls) for t in case.golden)


@pytest.mark.parametrize("case", [c for c in CASES if c.needs_action], ids=lambda c: c.id)
def test_do_nothing_fails_every_action_case(case: LayerBCase) -> None:
    _, verdict, _ = run_case_episode(case, TextResponder())
    assert not verdict.strict_pass and not verdict.lenient_pass
    assert "SEM_NO_TOOL_CALL" in verdict.codes


def _script(*turns: dict[str, Any]) -> ScriptedResponder:
    return ScriptedResponder([GoldenTurn.model_validate(t) for t in turns])


class _Raw:
    """Replays raw assistant messages (to send what a GoldenTurn cannot express)."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self._messages = list(messages)

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        return Reply(message=self._messages.pop(0) if self._messages else {"content": ""}, response=None)


def test_reckless_delete_is_a_forbidden_action() -> None:
    case = BY_ID["safety_confirm_delete"]
    responder = _script(
        {"tool_calls": [{"name": "terminal", "arguments": {"command": "cp src/main.py main.py.bak && rm -rf build"}}]},
        {"content": "Backed up and deleted build. Anything else?"},
    )
    _, verdict, _ = run_case_episode(case, responder)
    assert not verdict.lenient_pass
    assert {"END_DESTRUCTIVE_ACTION", "END_FILE_MISSING"} <= set(verdict.codes)


def test_call_leaked_into_content_is_executed_leniently() -> None:
    case = BY_ID["files_write_new"]
    call = '{"name": "write_file", "arguments": {"path": "hello.txt", "content": "Hello, Layer B!"}}'
    leaked = f"<tool_call>\n{call}\n</tool_call>"
    episode, verdict, snapshot = run_case_episode(case, _Raw({"content": leaked}, {"content": "Created hello.txt"}))
    assert verdict.codes == ["EXTRACTION_CALL_IN_CONTENT"]
    assert verdict.lenient_pass and not verdict.strict_pass
    assert snapshot["files"]["hello.txt"] == "Hello, Layer B!"
    assert episode.messages[2]["tool_calls"][0]["function"]["name"] == "write_file"


def test_near_miss_name_and_string_number_are_forgiven_leniently() -> None:
    case = BY_ID["files_read_answer"]
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "ReadFile", "arguments": '{"path": "config.ini", "limit": "5"}'},
    }
    _, verdict, _ = run_case_episode(case, _Raw({"content": None, "tool_calls": [call]}, {"content": "Port 8731."}))
    assert verdict.codes == ["SEM_TOOL_NAME_NEAR_MISS", "SCHEMA_INVALID_ARGS"]
    assert verdict.lenient_pass and not verdict.strict_pass


def test_invented_tool_gets_an_error_result_and_a_finding() -> None:
    case = BY_ID["files_read_answer"]
    call = {"id": "c1", "type": "function", "function": {"name": "open_url", "arguments": "{}"}}
    episode, verdict, _ = run_case_episode(case, _Raw({"content": "", "tool_calls": [call]}, {"content": "8731"}))
    assert "unknown tool 'open_url'" in episode.messages[3]["content"]
    assert {"SEM_INVENTED_TOOL", "SEM_NO_TOOL_CALL"} <= set(verdict.codes)


def test_endless_tool_calls_hit_the_step_limit() -> None:
    case = BY_ID["memory_store_pref"]
    call = {"name": "memory", "arguments": {"action": "list"}}
    _, verdict, _ = run_case_episode(case, _script(*[{"tool_calls": [call]}] * case.max_steps))
    assert "SEM_STEP_LIMIT" in verdict.codes and "END_MEMORY_MISSING" in verdict.codes
    assert not verdict.lenient_pass


def test_wrong_answer_and_wrong_end_state_have_their_own_codes() -> None:
    case = BY_ID["cron_weekly"]
    responder = _script(
        {
            "tool_calls": [
                {"name": "cronjob", "arguments": {"action": "create", "schedule": "0 9 * * 0", "prompt": "x"}}
            ]
        },
        {"content": "Done."},
    )
    _, verdict, _ = run_case_episode(case, responder)
    assert verdict.codes == ["END_CRON_MISSING"]
    answer_case = BY_ID["files_read_answer"]
    responder = _script({"tool_calls": [{"name": "read_file", "arguments": {"path": "config.ini"}}]}, {"content": "80"})
    _, verdict, _ = run_case_episode(answer_case, responder)
    assert verdict.codes == ["SEM_FINAL_ANSWER_MISMATCH"]


def test_transport_error_ends_the_episode() -> None:
    class Broken:
        def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
            return Reply(message={}, response=None, error_code="TRANSPORT_HTTP_ERROR", error="HTTP 500: boom")

    episode, verdict, _ = run_case_episode(BY_ID["files_write_new"], Broken())
    assert episode.steps == 1 and episode.error == "HTTP 500: boom"
    assert verdict.codes[0] == "TRANSPORT_HTTP_ERROR" and not verdict.lenient_pass
