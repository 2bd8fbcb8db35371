"""Every record kind the local-ai-registry defines imports, and import is never stricter than the registry.

The fixture tree (tests/fixtures/registry/tree, written for servepack, no upstream record copied) holds one record of
each kind and each launch kind; its registry records are first checked here by the registry's own JSON Schemas,
vendored unchanged under src/servepack/records/schemas/upstream/."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from referencing import Registry, Resource

from servepack.cli.main import cli

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"
UPSTREAM = Path(__file__).parents[3] / "src" / "servepack" / "records" / "schemas" / "upstream"
COLLECTION_SCHEMA = {"recipe": "recipe", "speed-sweep": "speed-sweep", "benchmark": "benchmark",
                     "hardware": "hardware", "model-instance": "model-instance"}


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _upstream(stem: str) -> jsonschema.Draft202012Validator:
    docs = {p.name: json.loads(p.read_text()) for p in UPSTREAM.glob("*.schema.json")}
    registry: Registry = Registry().with_resources((n, Resource.from_contents(d)) for n, d in docs.items())
    return jsonschema.Draft202012Validator(docs[f"{stem}.schema.json"], registry=registry)


def test_the_fixture_tree_is_valid_by_the_registrys_own_schemas() -> None:
    checked = 0
    for folder, stem in COLLECTION_SCHEMA.items():
        validator = _upstream(stem)
        for path in sorted((TREE / folder).glob("*.json")):
            record = json.loads(path.read_text())
            assert [e.message for e in validator.iter_errors(record)] == [], path
            assert record["id"] == path.stem
            checked += 1
    assert checked == 13  # models: the registry publishes no model schema (its validator rules apply in code)
    # the lab's own check of its recipes: exactly these fields, weights pinned, the card is the folder
    (lab,) = (TREE / "recipes").rglob("*.json")
    doc = json.loads(lab.read_text())
    assert set(doc) == {"model", "weights", "engine", "set", "card", "proof"} and lab.parent.name == doc["card"]
    assert len(lab.read_bytes()) <= 1024


def test_the_vendored_schemas_are_the_registrys_and_say_where_from() -> None:
    readme = (UPSTREAM / "README.md").read_text()
    for name in ("recipe", "speed-sweep", "benchmark", "hardware", "model-instance", "common"):
        path = UPSTREAM / f"{name}.schema.json"
        doc = json.loads(path.read_text())
        assert doc["$id"] == f"https://local-ai-registry.dev/schema/{name}.schema.json"
        assert path.read_text() == json.dumps(doc, indent=2) + "\n"  # as published: 2-space JSON, untouched
        assert f"`{name}.schema.json`" in readme
    assert "MIT" in readme and "a908edb82734a1745dd67abe889be68936dda53c" in readme


def test_every_kind_imports_with_a_count_per_kind(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(TREE), "--db", str(db))
    assert code == 0, out + err
    assert out.splitlines()[-1].startswith(
        "18 imported, 0 new versions, 0 already present, 0 skipped, 0 refused; by kind: 6 recipes, 3 speed sweeps, "
        "1 benchmarks, 1 hardware, 2 models, 2 model instances, 1 lab recipes, 1 lab runs, 1 engine profiles;")
    with sqlite3.connect(db) as conn:
        kinds = dict(conn.execute("SELECT kind, count(*) FROM records GROUP BY kind").fetchall())
        lab = conn.execute("SELECT id, hardware_id, engine, context_tokens, model_id FROM records WHERE kind = "
                           "'lab_recipe'").fetchall()
    assert kinds == {"recipe": 6, "speed_sweep": 3, "benchmark": 1, "hardware": 1, "model": 2, "model_instance": 2,
                     "lab_recipe": 1, "lab_run": 1, "engine_profile": 1}
    assert lab == [("ferro-gpu-24gb/wren-7b.llama.cpp-wren-7b-q4-32k.32k", "ferro-gpu-24gb", "llama.cpp", 32768,
                    "wren-7b")]
    # the sweep's measured_at carries an offset, not Z: the registry accepts it, servepack reads it as UTC and says so
    sweep = TREE / "speed-sweep" / "wren-7b-native-sweep.json"
    assert (f"imported speed sweep wren-7b-native-sweep from {sweep} (normalised: measured_at "
            "'2026-09-01T12:00:00+02:00' read as 2026-09-01T10:00:00Z") in out
    code, out, _ = _run("registry", "show", "wren-7b-native-sweep", "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["normalised"][0].startswith("measured_at '2026-09-01T12:00:00+02:00' read")


@pytest.mark.parametrize("when", ["2026-09-01 10:00:00", "2026-09-01T10:00:00+00:00", "yesterday", None])
def test_a_sweep_time_the_registry_accepts_is_never_refused(tmp_path: Path, when: str | None) -> None:
    """servepack once required a Z on accepted_at / measured_at / latest_point_at; the registry does not."""
    tree = tmp_path / "t"
    shutil.copytree(TREE, tree)
    path = tree / "speed-sweep" / "wren-7b-docker-sweep.json"
    doc = json.loads(path.read_text())
    doc["measured_at"] = doc["accepted_at"] = doc["metrics"]["latest_point_at"] = when
    path.write_text(json.dumps(doc))
    code, out, err = _run("registry", "import", str(path), "--db", str(tmp_path / "r.sqlite3"))
    assert code == 0, out + err
    if when == "yesterday":
        assert "measured_at 'yesterday' is not a time servepack can read; kept as is, read as unknown" in out


def test_a_refused_file_names_the_registry_rule_and_exits_1(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    shutil.copytree(TREE, tree)
    bad = tree / "recipe" / "wren-7b-docker.json"
    doc = json.loads(bad.read_text())
    doc["launch"]["kind"] = "teleport"
    bad.write_text(json.dumps(doc))
    no_name = tree / "benchmark" / "wren-arena.json"
    doc = json.loads(no_name.read_text())
    doc["name"] = ""
    no_name.write_text(json.dumps(doc))
    code, out, err = _run("registry", "import", str(tree), "--db", str(tmp_path / "r.sqlite3"))
    assert code == 1
    lines = [x for x in err.splitlines() if x.startswith("servepack: refused ")]
    assert lines == [
        f"servepack: refused {no_name}: benchmark breaks the registry's rule: name: benchmark has no name (upstream "
        "validate_registry.py, benchmarks)",
        f"servepack: refused {bad}: recipe breaks the registry's rule: launch.kind: 'teleport' is not one of "
        "['reference', 'docker', 'docker-compose', 'controller', 'script', 'native', 'host'] (upstream schema "
        "recipe.schema.json)"]
    assert out.splitlines()[-1].startswith("16 imported, 0 new versions, 0 already present, 0 skipped, 2 refused")


def test_wrong_arguments_exit_2(tmp_path: Path) -> None:
    code, _, err = _run("registry", "import", "--db", str(tmp_path / "r.sqlite3"))
    assert code == 2 and "Missing argument" in err
