"""BFCL through the CLI over real HTTP, against an in-process fake server that answers from BFCL's own answers."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from system_deps import missing


@pytest.fixture(autouse=True)
def _bfcl_data() -> None:
    if importlib.util.find_spec("bfcl_eval") is None:
        missing("BFCL's data is not installed", "pip install --no-deps bfcl-eval==2026.3.23, as make does")


def _answer(entry: Any) -> dict[str, Any]:
    """The first accepted value of every parameter the possible answer needs, as native calls."""
    from servepack.smoke.bfcl.data import openai_name

    calls = []
    for i, answer in enumerate(entry.ground_truth):
        name, params = next(iter(answer.items()))
        args = {k: v[0] for k, v in params.items() if v and v[0] != ""}
        calls.append({"id": f"c{i}", "type": "function",
                      "function": {"name": openai_name(name), "arguments": json.dumps(args)}})
    if not calls:
        return {"role": "assistant", "content": "None of the functions can answer that."}
    return {"role": "assistant", "content": None, "tool_calls": calls}


class FakeServer(ThreadingHTTPServer):
    replies: dict[str, dict[str, Any]]
    requests: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        message = self.server.replies.get(body["messages"][0]["content"], {"role": "assistant", "content": "?"})
        data = json.dumps({"object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls"}]}).encode()
        if body.get("stream"):
            chunk = {"choices": [{"index": 0, "delta": message, "finish_reason": "stop"}]}
            for i, c in enumerate(chunk["choices"][0]["delta"].get("tool_calls") or []):
                c["index"] = i
            data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    from servepack.smoke.bfcl.data import load_category, subset

    server = FakeServer(("127.0.0.1", 0), Handler)
    server.requests = []
    server.replies = {}
    for category in ("parallel", "irrelevance"):
        for e in subset(load_category(category), 20):
            server.replies[e.messages[0]["content"]] = _answer(e)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_cli_runs_bfcl_categories_and_writes_a_suite_result(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "bfcl"
    r = CliRunner().invoke(cli, ["smoke", "--base-url", f"http://127.0.0.1:{fake.server_address[1]}/v1",
                                 "--model", "fake", "--suite", "bfcl:parallel,irrelevance@5", "--mode", "nonstream",
                                 "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    (s,) = json.loads(r.stdout)["suites"]
    assert (s["suite"], s["n"]) == ("bfcl-parallel-irrelevance-n5", 10)
    written = json.loads((out / "bfcl-parallel-irrelevance-n5.json").read_text())
    assert set(written["categories"]) == {"parallel", "irrelevance"}
    # First accepted values pass wherever the answer is flat; irrelevance answers in text always pass.
    assert written["categories"]["irrelevance"]["strict_passed"] == 5
    assert written["categories"]["parallel"]["strict_passed"] >= 3
    assert all(req["parallel_tool_calls"] is True and not req["stream"] for req in fake.requests)
    assert all(t["function"]["description"].endswith("Python 3 syntax.") for t in fake.requests[0]["tools"])
    board = s["bfcl"]
    assert board["sampled"] and board["categories"]["irrelevance"]["passed"] == 5
    assert board["categories"]["parallel"]["size"] == 200 and board["categories"]["irrelevance"]["stream_compared"] == 0
    assert board["aggregates"]["irrelevance"] == {"accuracy": None, "ci95": None, "how": "unweighted",
                                                  "of": ["irrelevance", "live_irrelevance"],
                                                  "missing": ["live_irrelevance"]}


def test_cli_bfcl_usage_errors(fake: FakeServer) -> None:
    base = ["smoke", "--base-url", f"http://127.0.0.1:{fake.server_address[1]}", "--model", "m"]
    r = CliRunner().invoke(cli, [*base, "--suite", "bfcl:java"])
    assert r.exit_code == 2 and "no BFCL category java" in r.output
    r = CliRunner().invoke(cli, [*base, "--suite", "bfcl:simple", "--case", "simple_python_99999"])
    assert r.exit_code == 2 and "no entry simple_python_99999" in r.output


def _run(fake: FakeServer, out: Path, *extra: str) -> dict[str, Any]:
    r = CliRunner().invoke(cli, ["smoke", "--base-url", f"http://127.0.0.1:{fake.server_address[1]}/v1",
                                 "--model", "fake", "--out", str(out), "--json", *extra])
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def _rescore(out: Path) -> dict[str, Any]:
    r = CliRunner().invoke(cli, ["smoke", "score", str(out)])
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def test_smoke_score_of_a_recorded_run_gives_the_runs_verdicts(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    _run(fake, out, "--suite", "bfcl:parallel,irrelevance@5", "--suite", "agent_smoke")
    suites = {s["suite"]: s for s in _rescore(out)["suites"]}
    assert set(suites) == {"bfcl-parallel-irrelevance-n5", "agent_smoke"}
    for s in suites.values():
        assert s["changed"] == [] and s["rescored"] == s["recorded"], s["suite"]
    board = suites["bfcl-parallel-irrelevance-n5"]["bfcl"]["categories"]
    assert board["irrelevance"]["stream_compared"] == 5 and board["irrelevance"]["stream_same_decision"] == 5
    assert suites["agent_smoke"]["recorded"]["n"] > 0


def test_smoke_score_of_a_run_shows_the_cases_a_changed_answer_moves(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    _run(fake, out, "--suite", "bfcl:irrelevance@3", "--mode", "nonstream")
    path = out / "bfcl-irrelevance-n3.json"
    doc = json.loads(path.read_text())
    case = doc["cases"][0]
    assert case["strict_pass"]
    # The recorded answer replaced by a call: scored again, the case fails as a live run of that answer would.
    case["attempts"][0]["response"]["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": None, "arguments": "{}"}}]}
    path.write_text(json.dumps(doc))
    (s,) = _rescore(out)["suites"]
    assert s["changed"] == [{"case_id": case["case_id"], "recorded": {"strict_pass": True, "codes": []},
                             "rescored": {"strict_pass": False, "codes": ["BFCL_IRRELEVANT_CALL"]}}]
    assert (s["recorded"]["strict_passed"], s["rescored"]["strict_passed"]) == (3, 2)


def test_smoke_score_of_one_bfcl_entry(tmp_path: Path) -> None:
    from servepack.smoke.bfcl.runner import lookup_entry

    entry = lookup_entry("simple_python_0")
    right, wrong = tmp_path / "right.json", tmp_path / "wrong.json"
    right.write_text(json.dumps(_answer(entry)))
    wrong.write_text(json.dumps({"role": "assistant", "content": "The answer is 5."}))
    for path, passes, codes in ((right, True, []), (wrong, False, ["BFCL_DECODE"])):
        r = CliRunner().invoke(cli, ["smoke", "score", "--case", "bfcl/simple_python_0", "--response", str(path)])
        assert r.exit_code == 0, r.output
        verdict = json.loads(r.stdout)
        assert (verdict["case_id"], verdict["strict_pass"], verdict["codes"]) == ("simple_python_0", passes, codes)
    r = CliRunner().invoke(cli, ["smoke", "score", "--case", "bfcl/simple_python_99999", "--response", str(right)])
    assert r.exit_code == 2 and "no entry simple_python_99999" in r.output
    r = CliRunner().invoke(cli, ["smoke", "score", "--case", "bfcl/cooking_3", "--response", str(right)])
    assert r.exit_code == 2 and "no BFCL category 'cooking'" in r.output


def test_smoke_score_usage_errors(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["smoke", "score", str(tmp_path)])
    assert r.exit_code == 2 and "holds no smoke result" in r.output
    r = CliRunner().invoke(cli, ["smoke", "score", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "not a folder" in r.output
    r = CliRunner().invoke(cli, ["smoke", "score", "--case", "bfcl/simple_python_0"])
    assert r.exit_code == 2 and "needs --case and --response" in r.output


def test_full_runs_every_entry_of_a_bfcl_category(fake: FakeServer, tmp_path: Path) -> None:
    s = _run(fake, tmp_path / "run", "--suite", "bfcl:live_parallel", "--mode", "nonstream", "--full")["suites"][0]
    assert (s["suite"], s["n"]) == ("bfcl-live_parallel-all", 16)
    r = CliRunner().invoke(cli, ["smoke", "--base-url", f"http://127.0.0.1:{fake.server_address[1]}", "--model", "m",
                                 "--suite", "agent_smoke", "--full"])
    assert r.exit_code == 2 and "--full applies to BFCL suites" in r.output
