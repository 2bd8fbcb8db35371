"""`registry list` names a stored recipe's model through its held model instance.

A registry recipe in its stored form names only `model_instance_id`; the model is that instance's `model_id`.
servepack printed "model ?" for every such recipe (every real LocalMaxxing/Discord record) although choose matched
them by model id through the same instance."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from servepack.cli.main import cli

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_list_names_the_model_of_the_held_instance(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(TREE), "--db", str(db))[0] == 0
    code, out, err = _run("registry", "list", "--db", str(db))
    assert code == 0, out + err
    lines = out.splitlines()
    line = lines[lines.index("wren-7b-native") + 1]
    assert line.startswith("  model wren-7b (acme-wren-7b-gguf--q4-k-m) · ")  # the wrong answer: "model ? (…)"


def test_without_the_instance_the_model_stays_unknown(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(TREE / "recipe" / "wren-7b-native.json"), "--db", str(db))[0] == 0
    code, out, err = _run("registry", "list", "--db", str(db))
    assert code == 0, out + err
    assert "  model ? (acme-wren-7b-gguf--q4-k-m) · " in out
