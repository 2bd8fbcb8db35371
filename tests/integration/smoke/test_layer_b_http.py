"""Layer B through real HTTP: a fake OpenAI-compatible server replays golden scripts, streamed and not."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servepack.smoke.layer_b import run_layer_b
from servepack.smoke.layer_b.cases import load_cases
from servepack.smoke.layer_b.episode import golden_message
from servepack.smoke.runners import SuiteOptions
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer

CASES = {c.id: c for c in load_cases()[0]}
PICK = ["files_patch_value", "browser_fill_form", "terminal_count_rows"]

Behaviour = Callable[[dict[str, Any]], dict[str, Any] | None]


def golden_behaviour(body: dict[str, Any]) -> dict[str, Any] | None:
    """The golden assistant message for this point of the conversation (found by its user message)."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    case = next(c for c in CASES.values() if c.messages[0]["content"] == user)
    n = sum(m["role"] == "assistant" for m in body["messages"])
    return golden_message(case.golden[n], n)


def FakeServer(behaviour: Behaviour) -> ScriptedServer:
    """The shared fake server answering chat requests from a behaviour function (None: HTTP 500)."""
    return ScriptedServer(Script(respond=behaviour))


@pytest.fixture
def results(tmp_path: Path) -> ResultsDir:
    return ResultsDir(tmp_path / "results")


def test_golden_scripts_pass_over_http_in_both_modes(results: ResultsDir) -> None:
    with FakeServer(golden_behaviour) as server:
        lines: list[str] = []
        out = run_layer_b(server.base_url, "fake-model", "layer_b", results,
                          SuiteOptions(case_ids=PICK, progress=lines.append))
    assert (out.n, out.strict_passed, out.lenient_passed, out.executed) == (3, 3, 3, True)
    assert out.failure_codes == {}
    assert [len(c.attempts) for c in out.cases] == [2, 2, 2]
    assert {a.mode for c in out.cases for a in c.attempts} == {"episode"}
    assert [a.request["stream"] for a in out.cases[0].attempts] == [False, True]
    assert lines[-1] == "layer_b 3/3 terminal_count_rows: pass"
    fill = out.cases[1].attempts[1].response or {}
    assert fill["end_state"]["submissions"] == [
        {"form": "signup", "fields": {"email": "ada@example.com", "name": "Ada Lovelace"}}
    ]
    offered = {t["function"]["name"] for t in server.script.requests[0]["tools"]}
    assert offered == set(CASES["files_patch_value"].tools)
    assert all(r["model"] == "fake-model" and r["temperature"] == 0.0 for r in server.script.requests)
    written = json.loads((results.path / "layer_b.json").read_text())
    assert written["strict_passed"] == 3 and written["suite_version"] == "3" and len(written["runner_hash"]) == 64
    assert len((results.path / "layer_b.cases.jsonl").read_text().splitlines()) == 3


def test_http_errors_are_transport_findings(results: ResultsDir) -> None:
    with FakeServer(lambda body: None) as server:
        out = run_layer_b(server.base_url, "m", "layer_b", None,
                          SuiteOptions(case_ids=["memory_store_pref"], modes=("nonstream",)))
    case = out.cases[0]
    assert not case.lenient_pass and "TRANSPORT_HTTP_ERROR" in case.codes
    assert case.attempts[0].error is not None and "500" in case.attempts[0].error


def test_stream_episode_that_differs_is_flagged(results: ResultsDir) -> None:
    def lazy_when_streamed(body: dict[str, Any]) -> dict[str, Any] | None:
        if body.get("stream"):
            return {"role": "assistant", "content": "Noted."}
        return golden_behaviour(body)

    with FakeServer(lazy_when_streamed) as server:
        out = run_layer_b(server.base_url, "m", "layer_b", results, SuiteOptions(case_ids=["memory_store_pref"]))
    plain, streamed = out.cases[0].attempts
    assert plain.verdict.strict_pass
    assert "STREAM_EPISODE_MISMATCH" in streamed.verdict.codes and "END_MEMORY_MISSING" in streamed.verdict.codes
    assert out.strict_passed == 0 and out.failure_codes["STREAM_EPISODE_MISMATCH"] == 1


def test_unknown_case_and_bad_mode_are_usage_errors() -> None:
    from servepack.errors import UsageError

    with pytest.raises(UsageError, match="no case nope"):
        run_layer_b("http://127.0.0.1:9", "m", "layer_b", None, SuiteOptions(case_ids=["nope"]))
    with pytest.raises(UsageError, match="modes"):
        run_layer_b("http://127.0.0.1:9", "m", "layer_b", None, SuiteOptions(modes=("sideways",)))


def test_example_agent_client_against_the_fake_server() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "agent_client.py"
    task = CASES["files_write_new"].messages[0]["content"]
    with FakeServer(golden_behaviour) as server:
        proc = subprocess.run(
            [sys.executable, str(example), "--base-url", server.base_url + "/v1", "--model", "fake", task],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[2:] == [
        'tool call: write_file({"path": "hello.txt", "content": "Hello, Layer B!\\n"})',
        "  result: wrote 16 bytes to hello.txt",
        "final answer: Created hello.txt.",
    ]
    assert {r["model"] for r in server.script.requests} == {"fake"}
    assert "terminal" in {t["function"]["name"] for t in server.script.requests[0]["tools"]}


def test_max_steps_caps_every_case() -> None:
    with FakeServer(golden_behaviour) as server:
        out = run_layer_b(server.base_url, "m", "layer_b", None,
                          SuiteOptions(case_ids=["files_read_answer"], modes=("nonstream",)), max_steps=1)
    (attempt,) = out.cases[0].attempts
    assert (attempt.response or {})["steps"] == 1 and attempt.request["max_steps"] == 1
    assert "SEM_STEP_LIMIT" in attempt.verdict.codes and len(server.script.requests) == 1
