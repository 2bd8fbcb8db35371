"""The runner over real HTTP against an in-process fake OpenAI-compatible server that replays goldens."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


def _key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True)


GOLDENS: dict[str, Case] = {_key(c.messages): c for s in ("agent_smoke", "hermes_agent_smoke")
                            for c in load_suite(s).cases}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def stream_chunks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """SSE chunks for a message: content in 7-char pieces, tool-call arguments in 5-char pieces, interleaved."""
    out: list[dict[str, Any]] = [{"id": "chatcmpl-fake", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for piece in _pieces(message.get("content") or "", 7) if message.get("content") else []:
        out.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
    calls = message.get("tool_calls") or []
    for i, c in enumerate(calls):
        fn = {"name": c["function"]["name"], "arguments": ""}
        head = {"index": i, "id": c["id"], "type": "function", "function": fn}
        out.append({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
    parts = [_pieces(c["function"]["arguments"], 5) for c in calls]
    for step in range(max((len(p) for p in parts), default=0)):
        for i, p in enumerate(parts):  # round-robin across calls, so reassembly must go by index
            if step < len(p):
                delta = {"index": i, "function": {"arguments": p[step]}}
                out.append({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    finish = "tool_calls" if calls else "stop"
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return out


class FakeServer(ThreadingHTTPServer):
    behaviour = "golden"
    requests: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        behaviour = self.server.behaviour
        if behaviour == "http500":
            return self._send(500, {"error": {"code": 500, "message": "out of memory", "type": "server_error"}})
        if behaviour == "template500":
            return self._send(500, {"error": {"message": "tools param requires --jinja flag"}})
        case = GOLDENS[_key(body["messages"])]
        message = json.loads(json.dumps(case.golden))
        if behaviour == "mismatch" and body.get("stream") and message.get("tool_calls"):
            message["tool_calls"][0]["function"]["arguments"] = "{}"
        if not body.get("stream"):
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            return self._send(200, {"id": "chatcmpl-fake", "object": "chat.completion", "model": body["model"],
                                    "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in stream_chunks(message):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def _send(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = FakeServer(("127.0.0.1", 0), Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url(server: FakeServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("suite", ["agent_smoke", "hermes_agent_smoke"])
def test_goldens_replayed_pass_in_both_modes(fake: FakeServer, tmp_path: Path, suite: str) -> None:
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
    streamed = [r for r in fake.requests if r["stream"]]
    assert len(streamed) == n and len(fake.requests) == 2 * n
    assert all(r["temperature"] == 0.0 and r["model"] == "fake-model" for r in fake.requests)
    with_tools = [r for r in fake.requests if r.get("tools")]
    assert with_tools and all(t["type"] == "function" for r in with_tools for t in r["tools"])


def test_multi_call_streamed_deltas_reassemble(fake: FakeServer) -> None:
    res = run_suite(attach(url(fake), "m"), "hermes_agent_smoke", None, case_ids=["multi_tool.parallel_reads"])
    stream = res.cases[0].attempts[1]
    assert [r["parallel_tool_calls"] for r in fake.requests] == [True, True]
    assert stream.mode == "stream" and stream.verdict.strict_pass
    assert stream.response is not None and stream.response["stream_chunks"] > 6
    calls = stream.response["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["path"] for c in calls] == ["requirements.txt", "pyproject.toml"]


def test_mode_mismatch_is_its_own_code(fake: FakeServer) -> None:
    fake.behaviour = "mismatch"
    ids = ["tool_json.integer_minutes", "no_invented.arithmetic_directly"]
    res = run_suite(attach(url(fake), "m"), "agent_smoke", None, case_ids=ids)
    timer, arith = res.cases
    assert timer.attempts[0].verdict.strict_pass
    assert "STREAM_MISMATCH" in timer.attempts[1].verdict.codes and not timer.strict_pass
    assert "STREAM_MISMATCH" in timer.codes and res.failure_codes["STREAM_MISMATCH"] == 1
    assert arith.strict_pass  # a text answer is identical in both modes here


@pytest.mark.parametrize(("behaviour", "code"), [("http500", "TRANSPORT_HTTP_ERROR"),
                                                 ("template500", "TRANSPORT_TEMPLATE_ERROR")])
def test_http_500_is_a_transport_failure(fake: FakeServer, behaviour: str, code: str) -> None:
    fake.behaviour = behaviour
    res = run_suite(attach(url(fake), "m"), "agent_smoke", None, case_ids=["tool_json.weather_city"])
    case = res.cases[0]
    assert [a.verdict.codes for a in case.attempts] == [[code], [code]]
    assert all(a.verdict.findings[0].layer == "transport" and a.error and "HTTP 500" in a.error for a in case.attempts)
    assert (res.strict_passed, res.lenient_passed, res.failure_codes) == (0, 0, {code: 1})


def test_connection_refused_is_transport_connect(tmp_path: Path) -> None:
    from servepack.engine.server import free_port

    res = run_suite(attach(f"http://127.0.0.1:{free_port()}/v1", "m"), "agent_smoke", None,
                    case_ids=["tool_json.weather_city"], modes=("nonstream",))
    assert res.cases[0].codes == ["TRANSPORT_CONNECT"]


def test_repeat_reports_pass_k_and_flake(fake: FakeServer) -> None:
    res = run_suite(attach(url(fake), "m"), "agent_smoke", None, repeat=2, modes=("nonstream",),
                    case_ids=["tool_json.weather_city", "tool_json.enum_priority"])
    assert [len(c.attempts) for c in res.cases] == [2, 2]
    assert [a.repeat_index for a in res.cases[0].attempts] == [0, 1]
    cat = res.categories["tool_json"]
    assert (cat.n, cat.strict_passed, cat.flake_rate) == (2, 2, 0.0)
    assert cat.pass_k_wilson95 is not None and cat.pass_k_wilson95[1] == 1.0


def test_cli_attach_writes_results_and_prints_summary(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "attach"
    r = CliRunner().invoke(cli, ["smoke", "--base-url", url(fake) + "/v1", "--model", "fake",
                                 "--suite", "agent_smoke", "--case", "tool_json.weather_city",
                                 "--case", "short_code.roman", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    (s,) = summary["suites"]
    assert (s["suite"], s["n"], s["strict_passed"], s["lenient_passed"]) == ("agent_smoke", 2, 2, 2)
    assert Path(s["file"]).is_file() and Path(s["file"]).parent == out


def test_cli_usage_errors(fake: FakeServer) -> None:
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
