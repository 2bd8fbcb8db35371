"""Out-of-range options and odd input files are refused when parsed: one line, exit 2, no server started."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from servepack.cli.main import cli
from servepack.errors import UsageError
from servepack.settings import Settings

CASE = "agent_smoke/tool_json.weather_city"


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _assert_usage_error(result: Result, *expect: str) -> str:
    """exit 2 from click's own parameter check or from a UsageError: one message, no traceback."""
    assert isinstance(result.exception, SystemExit), f"not a clean exit: {result.exception!r}"
    assert result.exit_code == 2, result.output
    err = result.stderr
    assert "Traceback" not in err
    for text in expect:
        assert text in err, err
    return err


@pytest.fixture
def nothing_launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every entry point a command would call to launch a server; a test fails if one is reached by bad input."""
    reached: list[str] = []

    def stand_in(name: str) -> Any:
        def call(*_a: object, **_k: object) -> None:
            reached.append(name)
            raise UsageError(f"{name} reached")
        return call

    import servepack.cli.serve as serve
    import servepack.cli.smoke as smoke
    import servepack.pipeline as run  # `run` and `bench` look up what they run when they run
    import servepack.pipeline.bench as bench

    monkeypatch.setattr(run, "run_pack", stand_in("run_pack"))
    monkeypatch.setattr(bench, "bench_pack", stand_in("bench_pack"))
    monkeypatch.setattr(bench, "llama_bench_pack", stand_in("llama_bench_pack"))
    monkeypatch.setattr(serve, "open_session", stand_in("open_session"))
    monkeypatch.setattr(smoke, "smoke_pack", stand_in("smoke_pack"))
    return reached


BAD_OPTIONS = [
    ("run", "--samples", "0"), ("run", "--samples", "-1"), ("run", "--prompt-tokens", "-5"),
    ("run", "--prompt-tokens", "0"), ("run", "--gen-tokens", "0"), ("run", "--gen-tokens", "abc"),
    ("bench", "--samples", "0"), ("bench", "--prompt-tokens", "-5"), ("bench", "--gen-tokens", "0"),
    ("bench", "--concurrency", "0"), ("bench", "--warmup", "-1"), ("bench", "--timeout", "0"),
    ("bench", "--timeout", "nan"), ("bench", "--timeout", "inf"),
    ("llama-bench", "--repetitions", "0"), ("llama-bench", "--prompt-tokens", "-1"),
    ("serve", "--port", "70000"), ("serve", "--port", "0"), ("serve", "--port", "-1"), ("serve", "--port", "http"),
    ("smoke", "--temperature", "nan"), ("smoke", "--temperature", "-0.5"), ("smoke", "--repeat", "0"),
]


@pytest.mark.parametrize(("command", "option", "value"), BAD_OPTIONS)
def test_an_out_of_range_option_is_refused_at_parse_time(nothing_launches: list[str], command: str, option: str,
                                                         value: str) -> None:
    err = _assert_usage_error(_invoke(command, option, value), f"'{option}'")
    assert err.strip().splitlines() == [err.strip()] and err.startswith("servepack: error: Invalid value for")
    assert nothing_launches == []


@pytest.mark.parametrize(("command", "option", "value", "reached"), [
    ("run", "--samples", "1", "run_pack"), ("run", "--prompt-tokens", "1", "run_pack"),
    ("bench", "--timeout", "0.5", "bench_pack"), ("serve", "--port", "65535", "open_session"),
    ("serve", "--port", "1", "open_session"), ("smoke", "--temperature", "0", "smoke_pack"),
])
def test_values_at_the_limits_are_accepted(nothing_launches: list[str], command: str, option: str, value: str,
                                           reached: str) -> None:
    _assert_usage_error(_invoke(command, option, value), f"{reached} reached")
    assert nothing_launches == [reached]


@pytest.mark.parametrize("command", ["run", "bench", "llama-bench", "serve", "smoke"])
def test_verify_model_reaches_settings_for_that_command_only(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    seen: list[bool] = []

    def look(*_a: object, **_k: object) -> None:
        seen.append(Settings.load().verify_model)
        raise UsageError("stop")

    import servepack.cli.serve as serve
    import servepack.cli.smoke as smoke
    import servepack.pipeline as run  # `run` and `bench` look up what they run when they run
    import servepack.pipeline.bench as bench

    for module, name in ((run, "run_pack"), (bench, "bench_pack"), (bench, "llama_bench_pack"),
                         (serve, "open_session"), (smoke, "smoke_pack")):
        monkeypatch.setattr(module, name, look)
    monkeypatch.delenv("SERVEPACK_VERIFY_MODEL", raising=False)
    _invoke(command)
    _invoke(command, "--verify-model")
    assert seen == [False, True]
    assert "SERVEPACK_VERIFY_MODEL" not in os.environ


def _score(tmp_path: Path, content: bytes | str) -> Result:
    path = tmp_path / "response.json"
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    return _invoke("smoke", "score", "--case", CASE, "--response", str(path))


ODD_RESPONSES: list[tuple[str, bytes | str, str]] = [
    ("tool_calls: 5", json.dumps({"tool_calls": 5}), "tool_calls is a number, not an array"),
    ("function as a string", json.dumps({"tool_calls": [{"function": "x"}]}),
     "tool_calls[0].function is a string, not an object"),
    ("call as a number", json.dumps({"tool_calls": [5]}), "tool_calls[0] is a number, not an object"),
    ("name as a list", json.dumps({"tool_calls": [{"function": {"name": ["x"], "arguments": "{}"}}]}),
     "tool_calls[0].function.name is a array, not a string"),
    ("content as a number", json.dumps({"content": 5}), "content is a number"),
    ("choices of strings", json.dumps({"choices": ["x"]}), "choices must be an array of objects"),
    ("choices as a string", json.dumps({"choices": "x"}), "choices must be an array of objects"),
    ("message as a string", json.dumps({"choices": [{"message": "hi"}]}), "choices[0].message is a string"),
    ("finish_reason as a number", json.dumps({"choices": [{"message": {"content": "x"}, "finish_reason": 3}]}),
     "choices[0].finish_reason is a number"),
    ("recorded attempt with odd calls", json.dumps({"response": {"choices": [{"message": {"tool_calls": {}}}]}}),
     "response.choices[0].message.tool_calls is a object, not an array"),
    ("response as a list", json.dumps({"response": []}), "response is a array"),
    ("a JSON list", json.dumps([{"content": "x"}]), "a JSON list, not an object"),
    ("a JSON string", json.dumps("hello"), "a JSON str, not an object"),
    ("binary", bytes(range(256)) * 8, "not UTF-8 text"),
    ("nested 20,000 deep", "[" * 20_000 + "]" * 20_000, "nested too deeply"),
    ("not JSON", "{'content': 'x'}", "not JSON"),
    ("empty", "", "not JSON"),
]


@pytest.mark.parametrize(("label", "content", "expect"), ODD_RESPONSES, ids=[r[0] for r in ODD_RESPONSES])
def test_an_odd_response_file_is_one_line_exit_2(tmp_path: Path, label: str, content: bytes | str,
                                                 expect: str) -> None:
    err = _assert_usage_error(_score(tmp_path, content), expect)
    line = err.strip()
    assert "\n" not in line and line.startswith(f"servepack: error: --response {tmp_path / 'response.json'}: ")
    assert "give an assistant message" in line


GOOD_RESPONSES = [
    {"content": None, "tool_calls": [{"id": "1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"choices": [{"message": {"role": "assistant", "content": "",
                              "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                  "finish_reason": "tool_calls"}]},
    {"response": {"choices": [{"message": {"content": [{"type": "text", "text": "no"}]}, "finish_reason": None}]}},
    {"message": {"content": "It is sunny.", "tool_calls": None}},
    {"content": "x", "tool_calls": [{"function": {"name": "get_weather", "arguments": 5}}]},  # scored, not refused
]


@pytest.mark.parametrize("doc", [{"choices": []}, {"response": {"object": "chat.completion", "choices": []}}])
def test_a_body_with_empty_choices_is_scored_as_the_failed_answer_a_live_run_records(tmp_path: Path,
                                                                                      doc: dict[str, Any]) -> None:
    result = _score(tmp_path, json.dumps(doc))
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert (verdict["strict_pass"], verdict["lenient_pass"]) == (False, False)
    assert verdict["codes"] == ["TRANSPORT_BAD_RESPONSE"]


@pytest.mark.parametrize("doc", GOOD_RESPONSES)
def test_well_formed_responses_of_every_shape_are_scored(tmp_path: Path, doc: dict[str, Any]) -> None:
    result = _score(tmp_path, json.dumps(doc))
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["case_id"] == "tool_json.weather_city" and isinstance(verdict["strict_pass"], bool)


@pytest.mark.parametrize(("content", "expect"), [
    (bytes(range(256)) * 4, "not a UTF-8 JSON case file"),
    ("[" * 20_000 + "]" * 20_000, "not a UTF-8 JSON case file"),
])
def test_an_unreadable_case_file_is_one_line_exit_2(tmp_path: Path, content: bytes | str, expect: str) -> None:
    case = tmp_path / "case.json"
    case.write_bytes(content.encode() if isinstance(content, str) else content)
    response = tmp_path / "r.json"
    response.write_text(json.dumps({"content": "x"}))
    result = _invoke("smoke", "score", "--case", str(case), "--response", str(response))
    _assert_usage_error(result, expect)
