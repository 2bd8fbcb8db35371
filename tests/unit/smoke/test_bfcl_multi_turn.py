"""BFCL multi-turn: decoding, the checker's rules (on canned backend results) and the driver (scripted replies)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servepack.errors import UsageError
from servepack.smoke.bfcl.multi_turn import (
    ADDED_FUNCTIONS_PROMPT,
    MAX_STEPS,
    BackendError,
    Call,
    MultiTurnEntry,
    parse_call,
)
from servepack.smoke.bfcl.multi_turn_check import check, decode_step, score_turns
from servepack.smoke.bfcl.multi_turn_drive import converse
from servepack.smoke.client import ChatExchange

DOC = {"name": "cd", "description": "Change directory.",
       "parameters": {"type": "dict", "properties": {"folder": {"type": "string", "description": "d"}},
                      "required": ["folder"]}}
SORT = {"name": "sort", "description": "Sort a file.",
        "parameters": {"type": "dict", "properties": {"file_name": {"type": "string", "description": "f"}},
                       "required": ["file_name"]}}


def entry(ground_truth: list[list[str]], missed: dict[int, list[dict[str, Any]]] | None = None) -> MultiTurnEntry:
    turns = [[{"role": "user", "content": f"turn {t}"}] if t not in (missed or {}) else []
             for t in range(len(ground_truth))]
    return MultiTurnEntry(id="multi_turn_base_900", category="multi_turn_base", turns=turns,
                          classes=["GorillaFileSystem"], initial_config={}, functions=[DOC], missed=missed or {},
                          ground_truth=ground_truth)


def message(*calls: tuple[str, dict[str, Any]] | tuple[str, str], content: str | None = None) -> dict[str, Any]:
    tool_calls = [{"id": f"c{i}", "type": "function",
                   "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}}
                  for i, (n, a) in enumerate(calls)]
    return {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}


def step(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"message": message(*calls)}


def canned(turns: list[dict[str, Any]]) -> Any:
    """An executor returning fixed per-turn results, checking it was given the decoded calls."""
    seen: list[Any] = []

    def run(e: MultiTurnEntry, model: list[list[list[Call]]], truth: list[list[Call]] | None) -> list[dict[str, Any]]:
        seen.append((model, truth))
        return turns

    run.seen = seen  # type: ignore[attr-defined]
    return run


OK_TURN = {"model": [["ok"]], "ground_truth": ["ok"], "state_diffs": []}


def test_decode_takes_native_calls_with_object_arguments_only() -> None:
    assert decode_step(message(("cd", {"folder": "a"}))) == [{"name": "cd", "args": [], "kwargs": {"folder": "a"}}]
    assert decode_step(message(content="done")) is None
    assert decode_step({"role": "assistant", "content": None, "tool_calls": []}) is None
    # One call whose arguments are not a JSON object spoils the whole step, as upstream's decoder fails on it.
    assert decode_step(message(("cd", {"folder": "a"}), ("ls", "{not json"))) is None
    assert decode_step(message(("cd", "[1, 2]"))) is None


def test_ground_truth_calls_parse_positional_and_keyword_literals() -> None:
    assert parse_call("sort('final_report.pdf')") == {"name": "sort", "args": ["final_report.pdf"], "kwargs": {}}
    assert parse_call("ls(a=True)") == {"name": "ls", "args": [], "kwargs": {"a": True}}
    for bad in ("os.system('x')", "cd(folder=open('f'))", "cd(**k)", "cd("):
        with pytest.raises(UsageError, match="not a call with literal arguments"):
            parse_call(bad)


def test_a_conversation_matching_state_and_results_passes() -> None:
    e = entry([["cd(folder='a')"], ["sort('f')"]])
    run = canned([OK_TURN, OK_TURN])
    turns = [[step(("cd", {"folder": "a"})), {"message": message(content="done")}],
             [step(("sort", {"file_name": "f"}))]]
    verdict = score_turns(e, turns, run)
    assert verdict.strict_pass and verdict.lenient_pass
    model, truth = run.seen[0]
    assert model == [[[{"name": "cd", "args": [], "kwargs": {"folder": "a"}}]],
                     [[{"name": "sort", "args": [], "kwargs": {"file_name": "f"}}]]]  # the text step left out
    assert truth == [[{"name": "cd", "args": [], "kwargs": {"folder": "a"}}], [{"name": "sort", "args": ["f"],
                                                                                  "kwargs": {}}]]


def test_wrong_state_fails() -> None:
    diff = {"class": "GorillaFileSystem", "attribute": "root", "model": {"a": 1}, "ground_truth": {"b": 1}}
    turns = [{**OK_TURN, "state_diffs": [diff]}]
    problem = check(entry([["cd(folder='a')"]]), [[step(("cd", {"folder": "b"}))]], canned(turns))
    assert problem is not None and problem[0] == "BFCL_MT_STATE"
    assert "GorillaFileSystem.root" in problem[1]


def test_a_missing_ground_truth_result_fails_even_with_the_same_state() -> None:
    turns = [{"model": [["other"]], "ground_truth": ["ok", "ok"], "state_diffs": []}]
    problem = check(entry([["ls()", "ls()"]]), [[step(("ls", {}))]], canned(turns))
    assert problem is not None and problem[0] == "BFCL_MT_RESPONSE"
    # Counted with repeats: one "ok" does not stand for two.
    turns = [{"model": [["ok"]], "ground_truth": ["ok", "ok"], "state_diffs": []}]
    assert check(entry([["ls()", "ls()"]]), [[step(("ls", {}))]], canned(turns))[0] == "BFCL_MT_RESPONSE"  # type: ignore[index]


def test_results_of_earlier_turns_count_for_later_ones() -> None:
    turns = [{"model": [["listing"]], "ground_truth": ["listing"], "state_diffs": []},
             {"model": [["x"]], "ground_truth": ["listing"], "state_diffs": []}]
    e = entry([["ls()"], ["ls()"]])
    assert check(e, [[step(("ls", {}))], [step(("pwd", {}))]], canned(turns)) is None


def test_a_turn_without_calls_fails_where_calls_are_expected() -> None:
    turns = [OK_TURN, {"model": [], "ground_truth": ["ok"], "state_diffs": []}]
    problem = check(entry([["ls()"], ["ls()"]]), [[step(("ls", {}))], [{"message": message(content="no")}]],
                    canned(turns))
    assert problem is not None and problem[0] == "BFCL_MT_EMPTY_TURN"


def test_a_turn_with_an_empty_ground_truth_is_not_checked() -> None:
    # miss_func / miss_param: the turn where the model cannot act; state differences there are not judged.
    diff = {"class": "GorillaFileSystem", "attribute": "root", "model": 1, "ground_truth": 2}
    turns = [{"model": [["x"]], "ground_truth": [], "state_diffs": [diff]}, OK_TURN]
    e = entry([[], ["sort('f')"]])
    assert check(e, [[step(("ls", {}))], [step(("sort", {"file_name": "f"}))]], canned(turns)) is None
    # …but the next turn's state is, and it sees what the calls of that turn did.
    turns = [{"model": [["x"]], "ground_truth": [], "state_diffs": [diff]}, {**OK_TURN, "state_diffs": [diff]}]
    assert check(e, [[step(("ls", {}))], [step(("sort", {"file_name": "f"}))]], canned(turns))[0] == "BFCL_MT_STATE"  # type: ignore[index]


def test_fewer_or_more_turns_than_the_entry_fail_as_force_terminated() -> None:
    e = entry([["ls()"], ["ls()"]])
    run = canned([OK_TURN, OK_TURN])
    assert check(e, [[step(("ls", {}))]], run)[0] == "BFCL_MT_FORCE_TERMINATED"  # type: ignore[index]
    extra = [[step(("ls", {}))], [step(("ls", {}))], [step(("ls", {}))]]
    assert check(e, extra, run)[0] == "BFCL_MT_FORCE_TERMINATED"  # type: ignore[index]
    assert run.seen == []  # nothing executed for a cut-off conversation


def test_a_failed_backend_run_is_its_own_verdict() -> None:
    def broken(*_: Any) -> list[dict[str, Any]]:
        raise BackendError("the backend run failed (exit 1): ImportError")

    verdict = score_turns(entry([["ls()"]]), [[step(("ls", {}))]], broken)
    assert not verdict.strict_pass and verdict.codes == ["BFCL_MT_BACKEND"]


class Script:
    """Replies in order; records each request."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies, self.requests = list(replies), []  # type: list[dict[str, Any]], list[dict[str, Any]]

    def __call__(self, request: dict[str, Any]) -> ChatExchange:
        self.requests.append(json.loads(json.dumps(request)))
        msg = self.replies.pop(0) if self.replies else message(content="done")
        return ChatExchange(mode="nonstream", request=request, duration_s=0.0,
                        response={"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})


def echo_run(e: MultiTurnEntry, model: list[list[list[Call]]], truth: Any) -> list[dict[str, Any]]:
    return [{"model": [[f"ran {c['name']} {json.dumps(c['kwargs'])}" for c in s] for s in turn]} for turn in model]


def test_the_driver_sends_results_back_as_tool_messages_and_moves_on_after_text() -> None:
    e = entry([["cd(folder='a')"], ["ls()"]])
    send = Script([message(("cd", {"folder": "a"})), message(content="moved"), message(("ls", {}))])
    conv = converse(e, send, {"model": "m"}, echo_run)
    assert conv.error is None and not conv.force_quit and conv.rounds == 4
    second = send.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assert second[1]["tool_calls"][0]["id"] == "c0" and second[2] == {
        "role": "tool", "tool_call_id": "c0", "content": 'ran cd {"folder": "a"}'}
    third = send.requests[2]["messages"]
    assert third[-1] == {"role": "user", "content": "turn 1"} and third[-2] == {"role": "assistant",
                                                                                "content": "moved"}
    assert [len(t) for t in conv.turns] == [2, 2]
    assert conv.turns[0][0]["results"] == ['ran cd {"folder": "a"}']


def test_undecodable_calls_end_the_turn_and_are_dropped_from_the_history() -> None:
    e = entry([["ls()"], ["ls()"]])
    send = Script([message(("ls", "{oops")), message(content="ok")])
    conv = converse(e, send, {"model": "m"}, echo_run)
    assert [len(t) for t in conv.turns] == [1, 1]
    assert send.requests[1]["messages"][1] == {"role": "assistant", "content": ""}


def test_a_model_still_calling_after_the_step_limit_is_cut_off() -> None:
    e = entry([["ls()"], ["ls()"]])
    send = Script([message(("ls", {}))] * 100)
    conv = converse(e, send, {"model": "m"}, echo_run)
    assert conv.force_quit and conv.rounds == MAX_STEPS + 1 and len(conv.turns) == 1
    assert score_turns(e, conv.turns, echo_run).codes == ["BFCL_MT_FORCE_TERMINATED"]


def test_a_held_back_function_arrives_at_its_turn_with_upstreams_prompt() -> None:
    e = entry([["cd(folder='a')"], [], ["sort('f')"]], missed={1: [SORT]})
    send = Script([message(content="a"), message(content="b"), message(content="c")])
    converse(e, send, {"model": "m"}, echo_run)
    names = [[t["function"]["name"] for t in r["tools"]] for r in send.requests]
    assert names == [["cd"], ["cd", "sort"], ["cd", "sort"]]
    assert send.requests[1]["messages"][-1] == {"role": "user", "content": ADDED_FUNCTIONS_PROMPT}
    cd, added = send.requests[1]["tools"]
    assert cd["function"]["description"].endswith("Python 3 syntax.")
    assert added["function"]["description"] == "Sort a file."  # held back before the hint, as upstream


def test_a_transport_error_ends_the_attempt() -> None:
    e = entry([["ls()"]])

    def send(request: dict[str, Any]) -> ChatExchange:
        return ChatExchange(mode="nonstream", request=request, response=None, duration_s=0.0,
                        error_code="TRANSPORT_HTTP_ERROR", error="HTTP 500: boom")

    conv = converse(e, send, {"model": "m"}, echo_run)
    assert conv.error_code == "TRANSPORT_HTTP_ERROR" and conv.rounds == 1


def test_a_backend_failure_mid_conversation_is_recorded_and_is_the_verdict() -> None:
    from servepack.smoke.bfcl.multi_turn_drive import score_response

    def broken(*_: Any) -> list[dict[str, Any]]:
        raise BackendError("the backend run failed (killed by SIGKILL): no output")

    e = entry([["ls()"], ["ls()"]])
    conv = converse(e, Script([message(("ls", {}))]), {"model": "m"}, broken)
    assert conv.backend_error and conv.error is None and conv.rounds == 1
    response = {"turns": conv.turns, "backend_error": conv.backend_error}
    assert score_response(e, response, echo_run).codes == ["BFCL_MT_BACKEND"]
    # Without it, the same turns are judged by the checker (here: cut off after one of two turns).
    assert score_response(e, {"turns": conv.turns}, echo_run).codes == ["BFCL_MT_FORCE_TERMINATED"]
    assert score_response(e, {"turns": "x"}, echo_run).codes == ["TRANSPORT_BAD_RESPONSE"]
