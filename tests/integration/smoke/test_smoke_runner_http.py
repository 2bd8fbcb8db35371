"""The runner over real HTTP against an in-process fake OpenAI-compatible server that replays goldens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.engine.attach import attach
from servepack.smoke.cases import Case, load_suite
from servepack.smoke.result import SuiteResult
from servepack.smoke.runner import run_suite, runner_hash
from servepack.store import ResultsDir
from servepack.testing import Reply, Script, ScriptedServer
from servepack.testing.fake_server import Responder


def _key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True)


GOLDENS: dict[str, Case] = {_key(c.messages): c for s in ("agent_smoke", "hermes_agent_smoke")
                            for c in load_suite(s).cases}


def behaviour(kind: str) -> Responder:
    """The golden answer of each case; `mismatch` changes the streamed arguments; two kinds of HTTP 500."""

    def respond(body: dict[str, Any]) -> dict[str, Any] | Reply | None:
        if kind == "http500":
            return Reply(500, {"error": {"code": 500, "message": "out of memory", "type": "server_error"}})
        if kind == "template500":
            return Reply(500, {"error": {"message": "tools param requires --jinja flag"}})
        message: dict[str, Any] = json.loads(json.dumps(GOLDENS[_key(body["messages"])].golden))
        if kind == "mismatch" and body.get("stream") and message.get("tool_calls"):
            message["tool_calls"][0]["function"]["arguments"] = "{}"
        return message

    return respond


@pytest.fixture
def fake() -> Iterator[ScriptedServer]:
    with ScriptedServer(Script(respond=behaviour("golden"))) as server:
        yield server


def url(server: ScriptedServer) -> str:
    return server.base_url


@pytest.mark.parametrize("suite", ["agent_smoke", "hermes_agent_smoke"])
def test_goldens_replayed_pass_in_both_modes(fake: ScriptedServer, tmp_path: Path, suite: str) -> None:
    results = ResultsDir(tmp_path / "r")
    res = run_suite(attach(url(fake), "fake-model"), suite, results)
    n = len(load_suite(suite).cases)
    assert (res.n, res.strict_passed, res.lenient_passed) == (n, n, n)
    assert res.failure_codes == {} and res.runner_hash == runner_hash(load_suite(suite))
    assert all([a.mode for a in c.attempts] == ["nonstream", "stream"] for c in res.cases)
    assert sum(cat.n for cat in res.categories.values()) == n
    written = SuiteResult.model_validate_json((tmp_path / "r" / f"{suite}.json").read_text())
    assert written.strict_passed == n and written.temperature == 0.0
    assert len((tmp_path / "r" / f"{suite}.cases.jsonl").read_text().splitlines()) == n
    streamed = [r for r in fake.script.requests if r["stream"]]
    assert len(streamed) == n and len(fake.script.requests) == 2 * n
    assert all(r["temperature"] == 0.0 and r["model"] == "fake-model" for r in fake.script.requests)
    with_tools = [r for r in fake.script.requests if r.get("tools")]
    assert with_tools and all(t["type"] == "function" for r in with_tools for t in r["tools"])


def test_multi_call_streamed_deltas_reassemble(fake: ScriptedServer) -> None:
    res = run_suite(attach(url(fake), "m"), "hermes_agent_smoke", None, case_ids=["multi_tool.parallel_reads"])
    stream = res.cases[0].attempts[1]
    assert [r["parallel_tool_calls"] for r in fake.script.requests] == [True, True]
    assert stream.mode == "stream" and stream.verdict.strict_pass
    assert stream.response is not None and stream.response["stream_chunks"] > 6
    calls = stream.response["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["path"] for c in calls] == ["requirements.txt", "pyproject.toml"]


def test_mode_mismatch_is_its_own_code(fake: ScriptedServer) -> None:
    fake.script.respond = behaviour("mismatch")
    ids = ["tool_json.integer_minutes", "no_invented.arithmetic_directly"]
    res = run_suite(attach(url(fake), "m"), "agent_smoke", None, case_ids=ids)
    timer, arith = res.cases
    assert timer.attempts[0].verdict.strict_pass
    assert "STREAM_MISMATCH" in timer.attempts[1].verdict.codes and not timer.strict_pass
    assert "STREAM_MISMATCH" in timer.codes and res.failure_codes["STREAM_MISMATCH"] == 1
    assert arith.strict_pass  # a text answer is identical in both modes here


@pytest.mark.parametrize(("kind", "code"), [("http500", "TRANSPORT_HTTP_ERROR"),
                                            ("template500", "TRANSPORT_TEMPLATE_ERROR")])
def test_http_500_is_a_transport_failure(fake: ScriptedServer, kind: str, code: str) -> None:
    fake.script.respond = behaviour(kind)
    res = run_suite(attach(url(fake), "m"), "agent_smoke", None, case_ids=["tool_json.weather_city"])
    case = res.cases[0]
    assert [a.verdict.codes for a in case.attempts] == [[code], [code]]
    assert all(a.verdict.findings[0].layer == "transport" and a.error and "HTTP 500" in a.error for a in case.attempts)
    assert (res.strict_passed, res.lenient_passed, res.failure_codes) == (0, 0, {code: 1})


def test_connection_refused_is_transport_connect(tmp_path: Path) -> None:
    from servepack.engine.server import free_port

    res = run_suite(attach(f"http://127.0.0.1:{free_port()}/v1", "m", reach=False), "agent_smoke", None,
                    case_ids=["tool_json.weather_city"], modes=("nonstream",))
    assert res.cases[0].codes == ["TRANSPORT_CONNECT"]


def test_repeat_reports_pass_k_and_flake(fake: ScriptedServer) -> None:
    res = run_suite(attach(url(fake), "m"), "agent_smoke", None, repeat=2, modes=("nonstream",),
                    case_ids=["tool_json.weather_city", "tool_json.enum_priority"])
    assert [len(c.attempts) for c in res.cases] == [2, 2]
    assert [a.repeat_index for a in res.cases[0].attempts] == [0, 1]
    cat = res.categories["tool_json"]
    assert (cat.n, cat.strict_passed, cat.flake_rate) == (2, 2, 0.0)
    assert cat.pass_k_wilson95 is not None and cat.pass_k_wilson95[1] == 1.0


def test_cli_attach_writes_results_and_prints_summary(fake: ScriptedServer, tmp_path: Path) -> None:
    out = tmp_path / "attach"
    r = CliRunner().invoke(cli, ["smoke", "--base-url", url(fake) + "/v1", "--model", "fake",
                                 "--suite", "agent_smoke", "--case", "tool_json.weather_city",
                                 "--case", "short_code.roman", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    (s,) = summary["suites"]
    assert (s["suite"], s["n"], s["strict_passed"], s["lenient_passed"]) == ("agent_smoke", 2, 2, 2)
    assert Path(s["file"]).is_file() and Path(s["file"]).parent == out


def test_cli_usage_errors(fake: ScriptedServer) -> None:
    r = CliRunner().invoke(cli, ["smoke", "--base-url", url(fake), "--suite", "agent_smoke"])
    assert r.exit_code == 2 and "--model" in r.output
    r = CliRunner().invoke(cli, ["smoke", "--base-url", url(fake), "--model", "m", "--suite", "nope"])
    assert r.exit_code == 2 and "no smoke suite 'nope'" in r.output


def test_cli_score_offline(tmp_path: Path) -> None:
    resp = tmp_path / "resp.json"
    resp.write_text(json.dumps({"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "set_timer", "arguments": '{"minutes": "25"}'}}]}))
    r = CliRunner().invoke(cli, ["smoke", "score", "--case", "agent_smoke/tool_json.integer_minutes",
                                 "--response", str(resp)])
    assert r.exit_code == 0, r.output
    verdict = json.loads(r.stdout)
    assert (verdict["strict_pass"], verdict["lenient_pass"]) == (False, True)
    assert verdict["codes"] == ["SCHEMA_TYPE", "SEM_ARG_VALUE"]
    assert all(f["lenient_ok"] for f in verdict["findings"])
    case_file = tmp_path / "case.json"
    case_file.write_text(load_suite("agent_smoke").cases[0].model_dump_json())
    resp.write_text(json.dumps({"choices": [{"message": load_suite("agent_smoke").cases[0].golden}]}))
    r = CliRunner().invoke(cli, ["smoke", "score", "--case", str(case_file), "--response", str(resp)])
    assert r.exit_code == 0 and json.loads(r.stdout)["strict_pass"] is True
