"""Issue 35 item 3: every file, suite, case and option a command names is opened and checked before any server
starts (exit 2, one line, nothing written), and a failure after the measurements began leaves what was measured:
server_bench.json, a sealed partial receipt, MEASURED.md.

The wrong answer each refusal guards against is the old order: the server started, the bench ran, and the input
failed after it (exit 2 with server_bench.json never written, or rc 70 for a JSON file of another kind). The
session is replaced by one that fails the test if anything reaches it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NoReturn

import pytest
from click.testing import CliRunner

from servepack.bench.llama_bench import LLAMA_BENCH_SCHEMA
from servepack.cli.main import cli
from servepack.errors import EngineError

NO_SESSION = "a server was started before the command's input was checked"


def _no_session(*_a: Any, **_k: Any) -> NoReturn:
    raise AssertionError(NO_SESSION)


def _invoke(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    assert not isinstance(r.exception, AssertionError), r.exception
    return r.exit_code, r.stdout, r.stderr


def _llama_bench_doc(**test: Any) -> dict[str, Any]:
    t = {"kind": "tg", "n_prompt": 0, "n_gen": 8, "n_depth": 0, "avg_ts": 50.0, "stddev_ts": 1.0,
         "samples_ts": [49.0, 51.0], "raw": {}} | test
    return {"schema_version": LLAMA_BENCH_SCHEMA, "argv": ["llama-bench"], "exit_code": 0, "tests": [t],
            "ignored_lines": 0}


def _hostile_files(tmp_path: Path) -> list[tuple[str, Path, str]]:
    """(what, path, words the one line must hold): each an input a user or an attacker could name."""
    tmp_path.mkdir()
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(50 * 1000 * 1000)  # sparse: 50 MB that take no disk
    folder = tmp_path / "folder.json"
    folder.mkdir()
    other = tmp_path / "server_bench.json"
    other.write_text(json.dumps({"schema_version": "servepack.server_bench/v2", "cells": []}))
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2, 3]")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps(_llama_bench_doc(avg_ts=-5.0)))
    raw = tmp_path / "raw-llama-bench.json"  # llama-bench's own -o json, not servepack's record of it
    raw.write_text(json.dumps([{"n_prompt": 0, "n_gen": 8, "avg_ts": 50.0}]))
    return [
        ("a FIFO", fifo, "not a regular file (a FIFO (named pipe))"),
        ("a device", Path("/dev/null"), "not a regular file (a character device)"),
        ("a 50 MB file", big, "larger than 16 MiB"),
        ("a folder", folder, "is a directory"),  # refused where the command line is read
        ("another servepack record", other, "not a llama_bench.json"),
        ("a JSON list", listing, "not a llama_bench.json"),
        ("binary bytes", binary, "not a llama_bench.json"),
        ("deep nesting", deep, "not a llama_bench.json"),
        ("a negative rate", negative, "not a finite number ≥ 0"),
        ("llama-bench's raw output", raw, "not a llama_bench.json"),
        ("no file", tmp_path / "absent.json", "no such file"),
    ]


def test_bench_refuses_each_hostile_llama_bench_json_before_any_server_starts(
        tmp_path: Path, tiny_pack: Path, fake_server_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("servepack.pipeline.bench.open_session", _no_session)
    results_root = Path(os.environ["SERVEPACK_RESULTS_DIR"])
    for what, path, words in _hostile_files(tmp_path / "in"):
        out = tmp_path / f"out-{path.name}"
        code, stdout, err = _invoke("bench", str(tiny_pack), "--server-bin", str(fake_server_bin),
                                    "--llama-bench-json", str(path), "--out", str(out))
        lines = err.strip().splitlines()
        assert code == 2 and stdout == "", (what, code, err)
        assert len(lines) == 1 and "--llama-bench-json" in lines[0] and str(path) in lines[0], (what, err)
        assert words in lines[0], (what, err)
        assert "internal error" not in err and not out.exists(), what
    assert list(results_root.iterdir()) == []


def test_bench_attach_checks_the_file_before_asking_the_server_anything(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    # port 9 on loopback: nothing listens; an attach that came first would say so instead
    code, _, err = _invoke("bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--llama-bench-json",
                           str(fifo))
    assert code == 2 and "not a regular file (a FIFO" in err and "127.0.0.1:9" not in err


def test_a_good_llama_bench_json_is_read_once_and_paired(tmp_path: Path, tiny_pack: Path,
                                                         fake_server_bin: Path) -> None:
    good = tmp_path / "llama_bench.json"
    good.write_text(json.dumps(_llama_bench_doc()))
    out = tmp_path / "run"
    code, _, err = _invoke("bench", str(tiny_pack), "--server-bin", str(fake_server_bin), "--llama-bench-json",
                           str(good), "--gen-tokens", "8", "--samples", "2", "--out", str(out))
    assert code == 0, err
    ratios = json.loads((out / "server_bench.json").read_text())["llama_bench_ratio"]
    assert [(r["metric"], r["llama_bench_tok_s"]) for r in ratios] == [("decode", 50.0)]


@pytest.mark.parametrize(("args", "words"), [
    (["--suite", "nosuch"], "no smoke suite 'nosuch'"),
    (["--suite", "agent_smoke", "--case", "no-such-case"], "suite agent_smoke: no case no-such-case"),
    (["--suite", "agent_smoke", "--suite", "hermes_agent_smoke", "--case", "x"], "--case needs exactly one suite"),
    (["--suite", "bfcl:no_such_category"], "no BFCL category no_such_category"),
    (["--suite", "bfcl@zero"], "the size after @ is a positive number or 'all'"),
    (["--suite", "../agent_smoke"], "no smoke suite '../agent_smoke'"),
    (["--prompt-tokens", "64", "--gen-tokens", "8", "--suite", "agent_smoke", "--suite", "nosuch"], "nosuch"),
])
def test_run_refuses_a_suite_or_case_that_is_not_there_before_the_bench(
        tiny_pack: Path, fake_server_bin: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
        words: str) -> None:
    monkeypatch.setattr("servepack.pipeline.run.open_session", _no_session)
    code, stdout, err = _invoke("run", str(tiny_pack), "--server-bin", str(fake_server_bin), *args)
    assert code == 2 and stdout == "" and words in err and len(err.strip().splitlines()) == 1, err
    assert list(Path(os.environ["SERVEPACK_RESULTS_DIR"]).iterdir()) == []


def test_a_failure_after_the_bench_leaves_what_was_measured_sealed(
        tmp_path: Path, tiny_pack: Path, fake_server_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The smoke phase fails after the bench measured: server_bench.json, a partial receipt over it, and the
    evidence (MEASURED.md, report.html) are there before the error is shown. Before, no MEASURED.md was left."""
    def broken_suite(*_a: Any, **_k: Any) -> NoReturn:
        raise EngineError("the smoke client lost the server (injected)")

    monkeypatch.setattr("servepack.pipeline.run.run_suite", broken_suite)
    out = tmp_path / "run"
    code, _, err = _invoke("run", str(tiny_pack), "--server-bin", str(fake_server_bin), "--suite", "agent_smoke",
                           "--gen-tokens", "8", "--samples", "2", "--out", str(out))
    assert code != 0 and "injected" in err
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "partial" and "injected" in receipt["error"]
    assert "server_bench.json" in receipt["files"] and (out / "server_bench.json").is_file()
    assert (out / "MEASURED.md").is_file() and (out / "report.html").is_file()
    code, _, err = _invoke("verify", str(out))
    assert code == 0, err


@pytest.mark.parametrize(("args", "words"), [
    (["--suite", "nosuch"], "no smoke suite 'nosuch'"),
    (["--suite", "agent_smoke", "--case", "no-such-case"], "suite agent_smoke: no case no-such-case"),
    (["--suite", "bfcl:no_such_category"], "no BFCL category no_such_category"),
    (["--suite", "agent_smoke", "--suite", "nosuch"], "no smoke suite 'nosuch'"),
])
def test_smoke_refuses_a_suite_or_case_that_is_not_there_before_any_server(
        tiny_pack: Path, fake_server_bin: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
        words: str) -> None:
    monkeypatch.setattr("servepack.pipeline.smoke.open_session", _no_session)
    monkeypatch.setattr("servepack.pipeline.smoke.attach", _no_session)
    for where in (["--server-bin", str(fake_server_bin), str(tiny_pack)],
                  ["--base-url", "http://127.0.0.1:9", "--model", "m"]):
        code, stdout, err = _invoke("smoke", *where, *args)
        assert code == 2 and stdout == "" and words in err and len(err.strip().splitlines()) == 1, (where, err)
    assert list(Path(os.environ["SERVEPACK_RESULTS_DIR"]).iterdir()) == []
