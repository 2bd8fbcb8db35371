"""BFCL multi-turn over real HTTP: the shared fake server answers each turn with tool calls, the calls run against the
wheel's backends in the sandbox, and the conversation is judged by state and response."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servepack.smoke import sandbox
from servepack.smoke.bfcl.leaderboard import as_dict, leaderboard, rows
from servepack.smoke.bfcl.multi_turn import ADDED_FUNCTIONS_PROMPT, MultiTurnEntry, load_category
from servepack.smoke.bfcl.runner import run_bfcl_suite
from servepack.smoke.rescore import case_judge, rescore_folder
from servepack.smoke.runners import SuiteOptions
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer

IDS = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_miss_func_2"]  # first questions all different


@pytest.fixture(autouse=True)
def _wheel_and_sandbox() -> None:
    if importlib.util.find_spec("bfcl_eval") is None:
        from system_deps import missing

        missing("BFCL's data is not installed", "pip install --no-deps bfcl-eval==2026.3.23, as make does")
    if sandbox.isolation().mode == "none":
        pytest.skip(f"no sandbox on this machine: {sandbox.isolation().reason}")


def entries() -> dict[str, MultiTurnEntry]:
    """IDS's entries by their first question (miss_func_N asks what base_N asks)."""
    found = {e.turns[0][0]["content"]: e for c in ("multi_turn_base", "multi_turn_miss_func")
             for e in load_category(c) if e.id in IDS}
    assert len(found) == len(IDS)
    return found


def behaviour(alter: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = lambda calls: calls
              ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Answer a turn's user message with its ground-truth calls (as `alter` changes them), anything else with text."""
    by_first = entries()

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        users = [m for m in body["messages"] if m["role"] == "user"]
        entry = by_first[users[0]["content"]]
        if body["messages"][-1]["role"] != "user":
            return {"role": "assistant", "content": "Done."}
        docs = entry.functions + [d for held in entry.missed.values() for d in held]
        calls = []
        for c in entry.ground_truth_calls()[len(users) - 1]:
            doc = next(d for d in docs if d["name"] == c["name"])
            args = {**dict(zip(doc["parameters"]["properties"], c["args"], strict=False)), **c["kwargs"]}
            calls.append({"id": f"call{len(calls)}", "type": "function",
                          "function": {"name": c["name"], "arguments": json.dumps(args)}})
        calls = alter(calls)
        return {"role": "assistant", "content": None, "tool_calls": calls} if calls else {
            "role": "assistant", "content": "I cannot do that with these tools."}

    return respond


def test_ground_truth_conversations_pass_over_http_in_both_modes(tmp_path: Path) -> None:
    math = next(e.id for e in load_category("multi_turn_base") if "MathAPI" in e.classes)
    script = Script(respond=behaviour())
    with ScriptedServer(script) as server:
        out = run_bfcl_suite(server.base_url, "fake-model", "bfcl:multi_turn", ResultsDir(tmp_path),
                             SuiteOptions(case_ids=[*IDS, math], modes=("nonstream", "stream")))
    assert [c.case_id for c in out.cases] == IDS
    assert (out.n, out.strict_passed, out.executed) == (3, 3, True), out.failure_codes
    assert list(out.skipped) == [math] and "mpmath" in out.skipped[math]
    assert "bfcl-multi-turn" in out.scorer_version
    assert [a.mode for a in out.cases[0].attempts] == ["nonstream", "stream"]
    # What the server saw: the turn's tools, every call's result back as a tool message, OpenAI's parallel default.
    first = script.requests[0]
    assert first["parallel_tool_calls"] is True
    assert {t["function"]["name"] for t in first["tools"]} >= {"cd", "mkdir", "mv", "post_tweet"}
    after = script.requests[1]["messages"]
    assert [m["role"] for m in after] == ["user", "assistant", "tool", "tool", "tool"]
    assert after[-1]["tool_call_id"] == "call2" and "final_report.pdf" in json.dumps(after[-1])
    held = [r for r in script.requests if r["messages"][-1].get("content") == ADDED_FUNCTIONS_PROMPT]
    assert held and "cat" in {t["function"]["name"] for t in held[0]["tools"]}
    miss = next(e for e in entries().values() if e.id == "multi_turn_miss_func_2")
    opening = next(r for r in script.requests if r["messages"][0]["content"] == miss.turns[0][0]["content"])
    assert "cat" not in {t["function"]["name"] for t in opening["tools"]}  # held back until its turn
    board = leaderboard(out)
    assert board.categories["multi_turn_base"].skipped == 1
    assert as_dict(board)["aggregates"]["multi-turn"]["missing"] == ["multi_turn_miss_param",  # type: ignore[index]
                                                                      "multi_turn_long_context"]
    assert any(r[0] == "multi_turn_base" and "2 of 200, 1 skipped" in r[3] for r in rows(board))
    saved = json.loads((tmp_path / f"{out.suite}.json").read_text())
    assert saved["skipped"] == out.skipped
    # Re-scored offline, the recorded conversations are replayed in the sandbox and judged as the run judged them.
    (again,) = rescore_folder(tmp_path)
    assert again.skipped is None and again.changed == [] and again.rescored is not None
    assert again.rescored.skipped == out.skipped and again.rescored.scorer_version == out.scorer_version
    # …and a recorded call changed afterwards changes the verdict.
    first = saved["cases"][0]["attempts"][0]
    call = first["response"]["turns"][0][0]["message"]["tool_calls"][1]["function"]
    call["arguments"] = json.dumps({"dir_name": "elsewhere"})
    (tmp_path / f"{out.suite}.json").write_text(json.dumps(saved))
    (again,) = rescore_folder(tmp_path)
    assert [c["case_id"] for c in again.changed] == ["multi_turn_base_0"]
    # The streamed conversation now made other calls than the (changed) non-streamed one: flagged as the run would.
    assert again.changed[0]["rescored"]["codes"] == ["BFCL_MT_STATE", "STREAM_MISMATCH"]
    _, judge = case_judge("bfcl/multi_turn_base_0")
    assert judge(first).codes == ["BFCL_MT_STATE"]
    assert judge(saved["cases"][0]["attempts"][1]).strict_pass  # the streamed attempt, unchanged


def test_wrong_calls_fail_over_http(tmp_path: Path) -> None:
    def drop_last(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return calls[:-1]

    def misname_folders(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = json.loads(json.dumps(calls))
        for c in out:
            if c["function"]["name"] == "mkdir":
                c["function"]["arguments"] = json.dumps({"dir_name": "elsewhere"})
        return out

    for alter, code in ((drop_last, {"BFCL_MT_RESPONSE", "BFCL_MT_STATE", "BFCL_MT_EMPTY_TURN"}),
                        (misname_folders, {"BFCL_MT_STATE"})):
        with ScriptedServer(Script(respond=behaviour(alter))) as server:
            out = run_bfcl_suite(server.base_url, "fake-model", "bfcl:multi_turn_base", None,
                                 SuiteOptions(modes=("nonstream",), case_ids=["multi_turn_base_0"]))
        case = out.cases[0]
        assert not case.strict_pass and set(case.codes) <= code and case.codes, (alter.__name__, case.codes)


def test_smoke_score_judges_one_recorded_conversation_from_the_cli(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from servepack.cli.main import cli

    def turn(name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        call = {"id": "a", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        return [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]

    def score(case: str, amount: float) -> Any:
        path = tmp_path / "answer.json"
        answer = {"turns": [turn("get_stock_info", {"symbol": "NVDA"}), turn("fund_account", {"amount": amount})]}
        path.write_text(json.dumps({"response": answer, "error": None}))
        return CliRunner().invoke(cli, ["smoke", "score", "--case", case, "--response", str(path)])

    right = score("bfcl/multi_turn_base_100", 2203.4)
    assert right.exit_code == 0 and json.loads(right.output)["strict_pass"] is True
    wrong = score("bfcl/multi_turn_base_100", 2203.5)
    assert wrong.exit_code == 0 and json.loads(wrong.output)["codes"] == ["BFCL_MT_STATE"]
    math = next(e.id for e in load_category("multi_turn_base") if "MathAPI" in e.classes)
    skipped = score(f"bfcl/{math}", 1.0)
    assert skipped.exit_code == 2 and "mpmath" in skipped.output and skipped.output.count("\n") == 1


def test_the_cli_runs_multi_turn_and_shows_skipped_entries(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from servepack.cli.main import cli

    math = next(e.id for e in load_category("multi_turn_base") if "MathAPI" in e.classes)
    with ScriptedServer(Script(respond=behaviour())) as server:
        args = ["smoke", "--base-url", server.base_url, "--model", "fake", "--suite", "bfcl:multi_turn_base",
                "--case", "multi_turn_base_0", "--case", math, "--mode", "nonstream", "--out", str(tmp_path)]
        shown = CliRunner().invoke(cli, args, env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        assert "1 of 200, 1 skipped" in shown.output and "multi-turn" in shown.output
        again = CliRunner().invoke(cli, [*args[:-1], str(tmp_path / "again"), "--json"])
        assert again.exit_code == 0, again.output
        as_json = json.loads(again.stdout)
    (suite,) = as_json["suites"]
    assert suite["n"] == 1 and suite["bfcl"]["categories"]["multi_turn_base"]["skipped"] == 1


def test_without_a_sandbox_multi_turn_is_refused_before_any_request(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from servepack.cli.main import cli

    script = Script(respond=behaviour())
    monkeypatch.setenv("SERVEPACK_SANDBOX", "off")
    sandbox.isolation.cache_clear()
    try:
        with ScriptedServer(script) as server:
            r = CliRunner().invoke(cli, ["smoke", "--base-url", server.base_url, "--model", "fake", "--suite",
                                         "bfcl:multi_turn_base", "--case", "multi_turn_base_0"])
    finally:
        monkeypatch.delenv("SERVEPACK_SANDBOX")
        sandbox.isolation.cache_clear()
    assert r.exit_code == 2 and "SERVEPACK_SANDBOX=off" in r.output and r.output.count("\n") == 1
    assert script.requests == []


def test_a_multi_turn_case_outside_the_suites_categories_is_a_usage_error() -> None:
    from servepack.errors import UsageError

    with pytest.raises(UsageError, match="not in --suite bfcl:multiple; run them with --suite bfcl:multi_turn"):
        run_bfcl_suite("http://127.0.0.1:9", "m", "bfcl:multiple", None,
                       SuiteOptions(modes=("nonstream",), case_ids=["multi_turn_base_0"]))
    with pytest.raises(UsageError, match="no entry multi_turn_base_999"):
        run_bfcl_suite("http://127.0.0.1:9", "m", "bfcl:multi_turn_base", None,
                       SuiteOptions(modes=("nonstream",), case_ids=["multi_turn_base_999"]))
