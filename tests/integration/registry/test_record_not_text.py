"""A record whose JSON holds a lone UTF-16 surrogate (`"\\ud800"`: an escape JSON allows, but no text) is refused
by the one reader of record JSON (`registry.format.check.load_json`), in one line: `registry import` hashed it
(UnicodeEncodeError, exit 70), `report --record` wrote the page with it (exit 70), `registry check` formatted it
(exit 70). Nothing is stored; every file in scratch directories."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.registry.format.check import load_json

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
WHY = "not a JSON registry record (a string holds \\ud800, a lone UTF-16 surrogate, which is no text)"


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    rec = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    rec["engine"]["version"] += "\ud800"
    path = tmp_path / "export" / "recipe" / "wren-7b-native.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")  # ASCII: the surrogate as \ud800
    assert "\\ud800" in path.read_text()
    return path


@pytest.mark.parametrize("argv", [
    ["registry", "show", "{f}"], ["reproduce", "{f}", "--dry-run"], ["report", "{run}", "--record", "{f}"],
], ids=["show", "reproduce", "report-record"])
def test_a_record_that_is_no_text_is_refused_in_one_line(hostile: Path, tmp_path: Path, argv: list[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    result = CliRunner().invoke(cli, [a.format(f=hostile, run=run) for a in argv])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"servepack: error: {hostile}: {WHY}"]
    assert not list(run.iterdir())  # no report written


def test_import_refuses_it_and_stores_nothing(hostile: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    result = CliRunner().invoke(cli, ["registry", "import", str(hostile), str(TREE / "hardware"), "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[0] == f"servepack: refused {hostile}: {WHY}"
    assert "internal error" not in result.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id FROM records").fetchall() == [("ferro-gpu-24gb",)]  # the good file only


def test_check_names_it_as_a_problem(hostile: Path) -> None:
    result = CliRunner().invoke(cli, ["registry", "check", str(hostile.parents[1])])
    assert result.exit_code == 1 and "internal error" not in result.stderr, result.output
    assert f"FAIL recipe/wren-7b-native.json: (file): not UTF-8 JSON ({WHY.split('(', 1)[1]}" in result.stdout


def test_load_json() -> None:
    assert load_json('{"a": ["\\u00e9\\ud83d\\ude00", {"b": 1}]}') == {"a": ["é😀", {"b": 1}]}  # a pair is text
    for raw in ('{"a": "\\ud800"}', '{"\\udfff": 1}', '[[["x\\udc00y"]]]'):
        with pytest.raises(ValueError, match="a lone UTF-16 surrogate, which is no text"):
            load_json(raw)
    with pytest.raises(ValueError, match="nested too deeply"):
        load_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError):
        load_json(b"\xff")
