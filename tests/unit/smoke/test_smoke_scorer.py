"""The layered scorer: stable codes per layer, strict versus lenient, matchers, code cases, Wilson intervals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from servepack.smoke import scorer
from servepack.smoke.cases import Case, Matcher, load_case_ref, same_value
from servepack.smoke.client import StreamAccumulator
from servepack.smoke.result import Attempt, CaseResult, Verdict, summarize_categories, wilson95
from servepack.smoke.runner import decision, score_response
from servepack.smoke.sandbox import SandboxResult
from servepack.smoke.scorer import message_of, score_message

TIMER = {"type": "function", "function": {"name": "set_timer", "parameters": {
    "type": "object", "properties": {"minutes": {"type": "integer"}, "label": {"type": "string"}},
    "required": ["minutes"], "additionalProperties": False}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def timer_case(**expect: Any) -> Case:
    return Case.model_validate({
        "id": "t.timer", "suite": "unit", "category": "tool_json", "rationale": "Catches a bad timer call.",
        "tools": [TIMER, WEATHER], "messages": [{"role": "user", "content": "timer 42 minutes"}],
        "expect": expect or {"kind": "tool_calls",
                             "calls": [{"name": "set_timer", "args": {"minutes": {"exact": 42}}}]},
        "golden": call_msg(("set_timer", {"minutes": 42})),
    })


def call_msg(*calls: tuple[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"c{i}", "type": "function",
         "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}}
        for i, (n, a) in enumerate(calls)]}


def codes(v: Verdict) -> list[str]:
    return v.codes


def test_clean_call_passes() -> None:
    v = score_message(timer_case(), call_msg(("set_timer", {"minutes": 42})))
    assert (v.strict_pass, v.lenient_pass, v.codes) == (True, True, [])


@pytest.mark.parametrize("content", [
    '{"name": "set_timer", "arguments": {"minutes": 42}}',
    '<tool_call>\n{"name": "set_timer", "arguments": {"minutes": 42}}\n</tool_call>',
    'Sure:\n```json\n{"name": "set_timer", "arguments": {"minutes": 42}}\n```',
])
def test_call_leaked_into_content_is_extraction_failure_lenient_ok(content: str) -> None:
    v = score_message(timer_case(), {"role": "assistant", "content": content})
    assert v.codes == ["EXTRACTION_CALL_IN_CONTENT"]
    assert v.findings[0].layer == "extraction"
    assert not v.strict_pass and v.lenient_pass


def test_string_42_for_integer_is_schema_type_lenient_ok() -> None:
    v = score_message(timer_case(), call_msg(("set_timer", {"minutes": "42"})))
    assert v.codes[0] == "SCHEMA_TYPE"
    assert v.findings[0].layer == "schema" and v.findings[0].lenient_ok
    assert not v.strict_pass and v.lenient_pass


def test_additional_property_is_refused_even_lenient() -> None:
    v = score_message(timer_case(), call_msg(("set_timer", {"minutes": 42, "seconds": 0})))
    assert v.codes == ["SCHEMA_ADDITIONAL_PROPERTY"]
    assert not v.strict_pass and not v.lenient_pass


def test_wrong_tool() -> None:
    v = score_message(timer_case(), call_msg(("get_weather", {"city": "Oslo"})))
    assert v.codes == ["SEM_WRONG_TOOL"]
    assert v.findings[0].layer == "semantics" and not v.lenient_pass


def test_invented_tool_fails_both() -> None:
    v = score_message(timer_case(), call_msg(("start_countdown", {"minutes": 42})))
    assert "SEM_INVENTED_TOOL" in v.codes
    assert not v.strict_pass and not v.lenient_pass


@pytest.mark.parametrize("name", ["setTimer", "set-timer", "set_timr", "functions.set_timer"])
def test_near_miss_tool_name_is_lenient_ok(name: str) -> None:
    v = score_message(timer_case(), call_msg((name, {"minutes": 42})))
    assert v.codes[0] == "SEM_TOOL_NAME_NEAR_MISS"
    assert not v.strict_pass and v.lenient_pass


def test_wrong_value_and_unparsable_arguments() -> None:
    v = score_message(timer_case(), call_msg(("set_timer", {"minutes": 41})))
    assert v.codes == ["SEM_ARG_VALUE"] and "expected 42" in v.findings[0].message
    v = score_message(timer_case(), call_msg(("set_timer", "{minutes: 42")))
    assert "EXTRACTION_ARGS_NOT_JSON" in v.codes and not v.lenient_pass
    v = score_message(timer_case(), call_msg(("set_timer", "[42]")))
    assert "EXTRACTION_ARGS_NOT_OBJECT" in v.codes


def test_no_call_at_all_and_extra_call() -> None:
    v = score_message(timer_case(), {"role": "assistant", "content": "Timer set!"})
    assert v.codes == ["SEM_NO_TOOL_CALL"]
    v = score_message(timer_case(), call_msg(("set_timer", {"minutes": 42}), ("get_weather", {"city": "Oslo"})))
    assert v.codes == ["SEM_EXTRA_CALL"]


def test_order_is_checked_only_when_asked() -> None:
    case = load_case_ref("hermes_agent_smoke/multi_tool.write_then_run")
    write = ("write_file", {"path": "test_sum.py", "content": "def test():\n    assert sum([1, 2, 3]) == 6\n"})
    run = ("terminal", {"command": "pytest -q test_sum.py"})
    assert score_message(case, call_msg(write, run)).strict_pass
    v = score_message(case, call_msg(run, write))
    assert "SEM_ORDER" in v.codes and not v.lenient_pass
    unordered = load_case_ref("hermes_agent_smoke/multi_tool.parallel_reads")
    a, b = ("read_file", {"path": "pyproject.toml"}), ("read_file", {"path": "requirements.txt"})
    assert score_message(unordered, call_msg(a, b)).strict_pass


def test_no_tool_call_cases() -> None:
    case = load_case_ref("agent_smoke/no_invented.no_email_tool")
    v = score_message(case, call_msg(("send_email", {"to": "boss"})))
    assert {"SEM_INVENTED_TOOL", "SEM_UNEXPECTED_TOOL_CALL"} <= set(v.codes)
    v = score_message(case, {"role": "assistant", "content": '{"name": "send_email", "arguments": {}}'})
    assert "SEM_UNEXPECTED_TOOL_CALL" in v.codes and not v.lenient_pass
    assert score_message(case, {"role": "assistant", "content": ""}).codes == ["SEM_EMPTY_ANSWER"]
    assert score_message(case, {"role": "assistant", "content": "Emailing now."}).codes == ["SEM_CONTENT_MISMATCH"]
    caps = load_case_ref("agent_smoke/no_invented.list_capabilities")
    v = score_message(caps, {"role": "assistant", "content": "get_weather, set_timer and send_email"})
    assert v.codes == ["SEM_FORBIDDEN_CONTENT"]


def test_also_accept_and_not_regex() -> None:
    case = load_case_ref("hermes_agent_smoke/safety.confirm_destructive")
    assert score_message(case, call_msg(("terminal", {"command": "ls -la ~"}))).strict_pass
    v = score_message(case, call_msg(("terminal", {"command": "rm -rf ~/*"})))
    assert not v.strict_pass and not v.lenient_pass
    assert not score_message(case, call_msg(("terminal", {"command": "find ~ -delete"}))).lenient_pass


def test_truncation_is_reported_and_never_passes() -> None:
    v = score_message(timer_case(), {"role": "assistant", "content": "I will set"}, finish_reason="length")
    assert "TRANSPORT_TRUNCATED" in v.codes
    cut = score_message(timer_case(), call_msg(("set_timer", {"minutes": 42})), finish_reason="length")
    assert cut.codes == ["TRANSPORT_TRUNCATED"] and not cut.lenient_pass


@pytest.fixture
def fake_sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[SandboxResult]]:
    import servepack.smoke.sandbox as sandbox

    queue: list[SandboxResult] = []
    monkeypatch.setattr(sandbox, "run_python", lambda code, *, timeout_s=10.0: queue[0])
    scorer._run_code.cache_clear()
    yield queue
    scorer._run_code.cache_clear()


FIB = "[0, 1, 1, 2, 3, 5, 8, 13, 21, 34]\n23416728348467685"


@pytest.mark.parametrize(("ran", "code", "lenient"), [
    (SandboxResult(FIB + "\n", "", 0, False, None, None), None, True),
    (SandboxResult(FIB + "  \n\n", "", 0, False, None, None), "CODE_STDOUT_MISMATCH", True),
    (SandboxResult("demo: 3\n" + FIB + "\n", "", 0, False, None, None), "CODE_STDOUT_MISMATCH", True),
    (SandboxResult("[0, 1]\n", "", 0, False, None, None), "CODE_STDOUT_MISMATCH", False),
    (SandboxResult("", "Traceback\nNameError: fib", 1, False, None, None), "CODE_ERROR", False),
    (SandboxResult("", "", None, True, None, None), "CODE_TIMEOUT", False),
    (SandboxResult("", "", None, False, "no network namespace", None), "SANDBOX_REFUSED", False),
])
def test_code_case_outcomes(fake_sandbox: list[SandboxResult], ran: SandboxResult, code: str | None,
                            lenient: bool) -> None:
    fake_sandbox.append(ran)
    case = load_case_ref("agent_smoke/short_code.fibonacci")
    v = score_message(case, {"role": "assistant", "content": "```python\ndef fib(n):\n    return n\n```"})
    assert v.codes == ([code] if code else [])
    assert v.lenient_pass is lenient


def test_code_case_without_code(fake_sandbox: list[SandboxResult]) -> None:
    case = load_case_ref("agent_smoke/short_code.fibonacci")
    assert score_message(case, {"role": "assistant", "content": "Use a loop."}).codes == ["EXTRACTION_NO_CODE"]


def test_matchers_keep_json_types_apart() -> None:
    assert not same_value(True, 1) and same_value(1, 1.0) and not same_value("1", 1)
    assert Matcher(exact=42).check("42") is not None
    assert Matcher(exact=42).check("42", lenient=True) is None
    assert Matcher(approx=149.99, tolerance=0.001).check(149.99) is None
    assert Matcher(approx=149.99, tolerance=0.001).check(150) is not None
    assert Matcher(one_of=["user", "memory"]).check("memory") is None
    assert Matcher(exact=None).check(None) is None
    with pytest.raises(ValueError, match="exactly one"):
        Matcher(regex="a", exact=1)


def test_message_of_accepts_bodies_attempts_and_messages() -> None:
    msg = {"role": "assistant", "content": "hi"}
    body = {"choices": [{"message": msg, "finish_reason": "stop"}]}
    assert message_of(body) == (msg, "stop")
    assert message_of({"response": body}) == (msg, "stop")
    assert message_of(msg) == (msg, None)
    body = {"choices": [{"message": call_msg(("set_timer", {"minutes": 42}))}]}
    assert score_response(timer_case(), body).strict_pass


def test_wilson_interval_values() -> None:
    assert wilson95(0, 10) == pytest.approx((0.0, 0.277533), abs=1e-6)
    assert wilson95(10, 10) == pytest.approx((0.722467, 1.0), abs=1e-6)
    assert wilson95(5, 10) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    assert wilson95(40, 40)[0] == pytest.approx(0.912378, abs=1e-6)
    assert wilson95(0, 0) == (0.0, 1.0)


def _case_result(cid: str, passes: list[bool]) -> CaseResult:
    attempts = [Attempt(mode="nonstream", repeat_index=i, request={}, response=None, duration_s=0.0,
                        verdict=Verdict(strict_pass=p, lenient_pass=p)) for i, p in enumerate(passes)]
    return CaseResult(case_id=cid, category="c", rationale="r", attempts=attempts, strict_pass=all(passes),
                      lenient_pass=all(passes), codes=[])


def test_flake_rate_and_pass_k() -> None:
    cats = summarize_categories([_case_result("a", [True, True]), _case_result("b", [True, False]),
                                 _case_result("c", [False, False]), _case_result("d", [True, True])], repeat=2)
    score = cats["c"]
    assert (score.n, score.strict_passed, score.flake_rate) == (4, 2, 0.25)
    assert score.pass_k_wilson95 == wilson95(2, 4)
    assert summarize_categories([_case_result("a", [True])], repeat=1)["c"].flake_rate is None


def test_stream_reassembly_by_index() -> None:
    acc = StreamAccumulator()
    def tc(**delta: Any) -> dict[str, Any]:
        return {"choices": [{"delta": {"tool_calls": [delta]}}]}

    chunks = [
        {"id": "x", "choices": [{"delta": {"role": "assistant", "content": None}}]},
        tc(index=0, id="a", function={"name": "read_file", "arguments": ""}),
        tc(index=1, id="b", function={"name": "read_file", "arguments": '{"pa'}),
        tc(index=0, function={"arguments": '{"path": "a.txt"}'}),
        tc(index=1, function={"arguments": 'th": "b.txt"}'}),
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}], "timings": {"predicted_n": 9}},
    ]
    for c in chunks:
        assert acc.feed_line("data: " + json.dumps(c)) is None
    assert acc.feed_line("data: [DONE]") is None and acc.done
    body = acc.result()
    msg = body["choices"][0]["message"]
    assert [json.loads(c["function"]["arguments"]) for c in msg["tool_calls"]] == [{"path": "a.txt"}, {"path": "b.txt"}]
    assert [c["id"] for c in msg["tool_calls"]] == ["a", "b"]
    assert body["choices"][0]["finish_reason"] == "tool_calls" and body["timings"] == {"predicted_n": 9}
    assert acc.feed_line('data: {"error": {"message": "Failed to parse tool call"}}') == (
        "TRANSPORT_TEMPLATE_ERROR", 'error in stream: {"message": "Failed to parse tool call"}')


def test_decision_ignores_wording_but_not_calls() -> None:
    assert decision({"content": "Hello"}) == decision({"content": "Hi there"})
    assert decision(call_msg(("a", {"x": 1}))) != decision(call_msg(("a", {"x": 2})))
    assert decision(call_msg(("a", '{"x": 1}'))) == decision(call_msg(("a", '{ "x":1 }')))
