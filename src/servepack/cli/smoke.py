"""`servepack smoke [PACK] --suite NAME` (run suites) and `servepack smoke score` (judge a recorded message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from servepack.cli._options import FiniteFloat, allow_server_flag_option, out_option, verify_model_option
from servepack.cli.render import print_json, progress, table
from servepack.errors import UsageError
from servepack.packs.schema import MAX_COUNT, MAX_TOKENS
from servepack.pipeline.smoke import SmokeRun, smoke_attached, smoke_pack
from servepack.safepath import read_bounded
from servepack.smoke.rescore import Rescored
from servepack.smoke.result import SuiteResult
from servepack.smoke.runners import MODES


class _SmokeGroup(click.Group):
    """A group whose first word defaults to `run`, so `servepack smoke PACK --suite X` works too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("smoke", cls=_SmokeGroup)
def smoke_group() -> None:
    """Agent-readiness smoke suites: run them against a pack or a served endpoint, or re-score offline."""


@smoke_group.command("run")
@click.argument("pack", required=False)
@click.option("--suite", "suites", multiple=True, help="Suite to run (repeatable; default: the pack's smoke.suites).")
@click.option("--preset", help="Preset to serve (default: the pack's smoke.preset).")
@click.option("--repeat", type=click.IntRange(min=1, max=MAX_COUNT), default=1, show_default=True,
              help="Run every case K times; reports pass^k and flake rate per category.")
@click.option("--base-url", help="Attach to a running server (http://127.0.0.1:PORT[/v1]) instead of launching.")
@click.option("--model", "model_name", help="Model name to send when attaching with --base-url.")
@click.option("--case", "case_ids", multiple=True, help="Only these case ids (repeatable; one suite only).")
@click.option("--mode", "modes", multiple=True, type=click.Choice(MODES),
              help="nonstream and/or stream (default: both; a difference is its own failure code).")
@click.option("--temperature", type=FiniteFloat(min=0, max=100),
              help="Sampling temperature (default: the pack's claims temperature).")
@click.option("--max-tokens", type=click.IntRange(min=16, max=MAX_TOKENS),
              help="Per response (default: the pack's smoke.max_tokens).")
@click.option("--server-bin", type=click.Path(path_type=Path), help="llama-server to use instead of the pin.")
@click.option("--model-path", type=click.Path(path_type=Path), help="Model file instead of the pin.")
@out_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@click.option("--full", is_flag=True,
              help="BFCL suites: every entry of each category (default: a fixed sample of 20 per category).")
@verify_model_option
@allow_server_flag_option
def run_cmd(pack: str | None, suites: tuple[str, ...], preset: str | None, repeat: int, base_url: str | None,
            model_name: str | None, case_ids: tuple[str, ...], modes: tuple[str, ...], temperature: float | None,
            max_tokens: int | None, server_bin: Path | None, model_path: Path | None, out: Path | None,
            as_json: bool, full: bool) -> None:
    """Run smoke suites (one response per case, non-streamed and streamed) and write <suite>.json."""
    if case_ids and len(suites) != 1:
        raise UsageError("--case needs exactly one --suite")
    if full:
        from servepack.smoke.bfcl.runner import full_suite, is_suite_name

        if not any(is_suite_name(s) for s in suites):
            raise UsageError("--full applies to BFCL suites: name one with --suite bfcl[:CATEGORY,...]")
        suites = tuple(full_suite(s) for s in suites)
    chosen_modes = tuple(dict.fromkeys(modes)) or MODES
    if base_url:
        if not model_name:
            raise UsageError("--base-url needs --model NAME (the served model alias)")
        run = smoke_attached(base_url, model_name, suites, out=out, label=pack or model_name,
                             temperature=0.0 if temperature is None else temperature, max_tokens=max_tokens or 512,
                             repeat=repeat, modes=chosen_modes, progress=progress, case_ids=case_ids or None)
    else:
        if model_name:
            raise UsageError("--model names the served model when attaching; use --model-path for a model file")
        run = smoke_pack(pack, suites, preset=preset, out=out, temperature=temperature, max_tokens=max_tokens,
                         repeat=repeat, modes=chosen_modes, progress=progress, case_ids=case_ids or None,
                         server_bin=server_bin, model_path=model_path)
    _render(run)
    if as_json:
        print_json(summary(run))


def summary(run: SmokeRun) -> dict[str, Any]:
    """The machine summary: one entry per suite, with the file it was written to."""
    return {
        "results_dir": str(run.results_dir),
        "base_url": run.base_url,
        "model": run.model,
        "suites": [_suite_summary(r, run.results_dir) for r in run.results],
    }


def _suite_summary(r: SuiteResult, results_dir: Path) -> dict[str, Any]:
    return {
        "suite": r.suite, "suite_version": r.suite_version, "n": r.n, "strict_passed": r.strict_passed,
        "lenient_passed": r.lenient_passed, "duration_s": r.duration_s, "temperature": r.temperature,
        "repeat": r.repeat, "runner_hash": r.runner_hash, "failure_codes": r.failure_codes,
        "file": str(results_dir / f"{r.suite}.json"), **_bfcl_summary(r),
    }


def _bfcl_summary(r: SuiteResult) -> dict[str, Any]:
    """A BFCL suite's leaderboard-shaped summary under "bfcl" ({} for other suites)."""
    from servepack.smoke.bfcl.leaderboard import as_dict, is_bfcl_result, leaderboard

    return {"bfcl": as_dict(leaderboard(r))} if is_bfcl_result(r) else {}


def _render_bfcl(r: SuiteResult) -> None:
    from servepack.smoke.bfcl.leaderboard import COLUMNS, is_bfcl_result, leaderboard, rows

    if is_bfcl_result(r):
        table(f"{r.suite} as the BFCL leaderboard scores it (first non-streamed answer per entry)", COLUMNS,
              rows(leaderboard(r)))


def _render(run: SmokeRun) -> None:
    from servepack.smoke.bfcl.leaderboard import is_bfcl_result, leaderboard

    rows = []
    for r in run.results:
        top = ", ".join(f"{code}×{n}" for code, n in list(r.failure_codes.items())[:3]) or "—"
        strict = f"{r.strict_passed}/{r.n}"
        if is_bfcl_result(r):  # the leaderboard's count: streamed answers are in the BFCL table, apart
            strict = f"{leaderboard(r).passed}/{r.n} (non-streamed)"
        rows.append([f"{r.suite} v{r.suite_version}", strict, f"{r.lenient_passed}/{r.n}",
                     f"{r.duration_s:.1f} s", f"{r.temperature:g}", top])
    table(f"smoke · {run.model} · {run.results_dir}", ["suite", "strict", "lenient", "duration", "temp",
                                                         "top failure codes"], rows)
    for r in run.results:
        _render_bfcl(r)


@smoke_group.command("score")
@click.argument("results_dir", required=False, type=click.Path(path_type=Path))
@click.option("--case", "case_ref",
              help="A case JSON file, SUITE/CASE_ID of a shipped case (e.g. agent_smoke/tool_json.weather_city), "
                   "or bfcl/ENTRY_ID of a BFCL entry (e.g. bfcl/simple_python_0).")
@click.option("--response", "response_file", type=click.Path(path_type=Path),
              help="JSON: an assistant message, a chat-completion body, or a recorded attempt.")
def score_cmd(results_dir: Path | None, case_ref: str | None, response_file: Path | None) -> None:
    """Score one recorded response offline (--case, --response), or every attempt of a smoke run's folder again
    (RESULTS_DIR), and print JSON."""
    from servepack.smoke.rescore import case_judge, rescore_folder

    if results_dir is not None:
        if case_ref or response_file:
            raise UsageError("smoke score takes RESULTS_DIR or --case with --response, not both")
        print_json({"results_dir": str(results_dir), "suites": [rescored_summary(r)
                                                                 for r in rescore_folder(results_dir)]})
        return
    if not case_ref or not response_file:
        raise UsageError("smoke score needs --case and --response (one response), or RESULTS_DIR (a whole run)")
    case_id, judge = case_judge(case_ref)
    response = read_response(response_file)
    problem = response_problem(response)
    if problem:
        raise UsageError(f"--response {response_file}: {problem}; {RESPONSE_SHAPES}")
    verdict = judge(response)
    print_json({"case_id": case_id, **verdict.model_dump(), "codes": verdict.codes})


def rescored_summary(r: Rescored) -> dict[str, Any]:
    """One suite of `smoke score RESULTS_DIR`: its counts as recorded and as scored again, and the cases that moved."""
    def counts(s: SuiteResult) -> dict[str, Any]:
        return {"n": s.n, "strict_passed": s.strict_passed, "lenient_passed": s.lenient_passed,
                "failure_codes": s.failure_codes, "scorer_version": s.scorer_version, "runner_hash": s.runner_hash}

    out: dict[str, Any] = {"suite": r.recorded.suite, "file": str(r.file), "recorded": counts(r.recorded)}
    if r.rescored is None:
        return {**out, "skipped": r.skipped}
    return {**out, "rescored": counts(r.rescored), "changed": r.changed, **_bfcl_summary(r.rescored)}


MAX_RESPONSE_BYTES = 16 << 20
RESPONSE_SHAPES = ('give an assistant message {"content": ..., "tool_calls": [{"function": {"name": ..., '
                   '"arguments": ...}}]}, a chat-completion body {"choices": [{"message": ...}]}, '
                   'or a recorded attempt {"response": ...}')


def read_response(path: Path) -> dict[str, Any]:
    """The --response file as a JSON object; UsageError naming what is wrong with it otherwise."""
    raw = read_bounded(path, MAX_RESPONSE_BYTES, RESPONSE_SHAPES, label=f"--response {path}")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"--response {path}: not UTF-8 text (a binary file?); {RESPONSE_SHAPES}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--response {path}: not JSON ({exc}); {RESPONSE_SHAPES}") from None
    except RecursionError:
        raise UsageError(f"--response {path}: JSON nested too deeply; {RESPONSE_SHAPES}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"--response {path}: a JSON {type(doc).__name__}, not an object; {RESPONSE_SHAPES}")
    return doc


def _kind(value: Any) -> str:
    return "null" if value is None else {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number")


def response_problem(doc: dict[str, Any]) -> str | None:
    """What in a response document the scorer cannot read (named by its JSON path), or None."""
    where = ""
    if "response" in doc:
        if not isinstance(doc["response"], dict):
            return f"response is a {_kind(doc['response'])}, not an object"
        doc, where = doc["response"], "response."
    if "choices" in doc:
        choices = doc["choices"]
        if choices == []:
            return None  # a body a server sent with no answer: scored as the failed answer a live run records
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            return f"{where}choices must be an array of objects"
        first = choices[0]
        if not isinstance(first.get("message"), dict):
            return f"{where}choices[0].message is a {_kind(first.get('message'))}, not an object"
        if not isinstance(first.get("finish_reason"), str | None):
            return f"{where}choices[0].finish_reason is a {_kind(first['finish_reason'])}, not a string"
        return _message_problem(first["message"], f"{where}choices[0].message.")
    if "message" in doc:
        if not isinstance(doc["message"], dict):
            return f"{where}message is a {_kind(doc['message'])}, not an object"
        return _message_problem(doc["message"], f"{where}message.")
    return _message_problem(doc, where)


def _message_problem(msg: dict[str, Any], where: str) -> str | None:
    content = msg.get("content")
    if not isinstance(content, str | list | None):
        return f"{where}content is a {_kind(content)}, not a string, an array of parts or null"
    calls = msg.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f"{where}tool_calls is a {_kind(calls)}, not an array"
    for i, call in enumerate(calls):
        if not isinstance(call, dict):
            return f"{where}tool_calls[{i}] is a {_kind(call)}, not an object"
        fn = call.get("function")
        if not isinstance(fn, dict):
            return f"{where}tool_calls[{i}].function is a {_kind(fn)}, not an object with name and arguments"
        if not isinstance(fn.get("name"), str | None):
            return f"{where}tool_calls[{i}].function.name is a {_kind(fn['name'])}, not a string"
    return None


COMMANDS: list[click.Command] = [smoke_group]
