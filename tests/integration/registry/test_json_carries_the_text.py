"""Issue 33 item 7: --json carries what the text shows, ids as the registry spells them, every violation listed.

The wrong answers (before): `list --json` had model_id null where the text showed the model; a lab recipe's model
`qwen3.6-35b-a3b` came out folded as `qwen3-6-35b-a3b`, an id the registry does not have; the list's last line
counted the lab's recipes as shown but not as held; `show` printed Python dict reprs and no docker launch; a refused
record's --json gave the first rule and "(and 1 more)", never the others."""

from __future__ import annotations

import json
import shutil
from itertools import pairwise
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
CARD = "ferro-gpu-24gb"
LAB_MODEL = "wren3.6-7b-a1b"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("tree") / "registry"
    shutil.copytree(TREE, tree)
    (lab,) = (tree / "recipes" / CARD).glob("*.json")
    doc = json.loads(lab.read_text())
    doc["model"] = LAB_MODEL  # a dotted model id, as the lab's are
    lab.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    path = tree.parent / "r.sqlite3"
    code, out, err = _run("registry", "import", str(tree), "--db", str(path))
    assert code == 0, out + err
    return path


def test_list_json_names_the_model_the_text_shows_spelled_as_the_record_does(db: Path) -> None:
    code, out, _ = _run("registry", "list", "--db", str(db))
    assert code == 0
    shown = {}
    lines = out.splitlines()
    for head, body in pairwise(lines):
        if body.startswith("  model "):
            shown[head.split()[-1] if head.startswith("lab recipe ") else head.split()[0]] = body.split()[1]
    code, out, _ = _run("registry", "list", "--db", str(db), "--json")
    got = {r["id"]: r["model_id"] for r in json.loads(out)["recipes"]}
    assert got == shown and got["wren-7b-native"] == "wren-7b"
    lab_id = next(i for i in got if i.startswith(f"{CARD}/"))
    assert got[lab_id] == LAB_MODEL  # not wren3-6-7b-a1b
    code, out, _ = _run("registry", "choose", LAB_MODEL, "--db", str(db), "--json")
    assert code == 0 and {c["model_id"] for c in json.loads(out)["candidates"] if c["kind"] == "lab_recipe"} == {
        LAB_MODEL}


def test_the_list_counts_the_lab_recipes_it_shows(db: Path) -> None:
    code, out, _ = _run("registry", "list", "--db", str(db))
    assert code == 0
    last = out.splitlines()[-1]
    assert last.startswith("7 recipes shown; the database holds 7 recipes (1 of them lab recipes), 3 speed sweeps")


def test_show_prints_no_dict_repr_and_the_docker_launch(db: Path) -> None:
    code, out, _ = _run("registry", "show", "wren-7b-docker", "--db", str(db))
    assert code == 0 and "{'" not in out and "'}" not in out
    assert "  serving max_concurrency 1, max_context_tokens 16384, tensor_parallel 1 · capabilities chat true" in out
    assert "    image: ghcr.io/example/llama.cpp:server@sha256:" in out
    code, out, _ = _run("registry", "show", "wren-7b-docker", "--db", str(db), "--json")
    parts = json.loads(out)["launch_as_recorded"]
    assert {"part": "entrypoint", "value": "/app/llama-server"} in parts


def test_a_refused_records_json_lists_every_rule_it_breaks(tmp_path: Path) -> None:
    doc = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    doc["status"], doc["hardware_count"] = "great", "one"
    path = tmp_path / "recipe" / "wren-7b-native.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    code, out, err = _run("registry", "import", str(path), "--db", str(tmp_path / "r.sqlite3"))
    assert code == 1 and "(and 1 more)" in err
    code, out, _ = _run("registry", "import", str(path), "--db", str(tmp_path / "r.sqlite3"), "--json")
    (refused,) = json.loads(out)["files"]
    assert refused["outcome"] == "refused" and "(and 1 more)" in refused["reason"]
    assert [p.split(":")[0] for p in refused["problems"]] == ["hardware_count", "status"]
