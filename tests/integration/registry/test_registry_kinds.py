"""Every record kind the local-ai-registry defines imports, and import is never stricter than the registry.

The fixture tree (tests/fixtures/registry/tree, written for servepack, no upstream record copied) holds one record of
each kind and each launch kind; its registry records are first checked here by the registry's own JSON Schemas,
vendored unchanged under src/servepack/registry/format/schemas/upstream/."""

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
UPSTREAM = Path(__file__).parents[3] / "src" / "servepack" / "registry" / "format" / "schemas" / "upstream"
COLLECTION_SCHEMA = {"recipe": "recipe", "speed-sweep": "speed-sweep", "benchmark": "benchmark",
                     "hardware": "hardware", "model-instance": "model-instance"}


def _why(out: str) -> str:
    """`reproduce --dry-run` of a record it cannot run here (issue 33 item 6): shown, exit 0; the reason is the line
    "would not run here: …" (it was exit 2, the reason on stderr, nothing shown)."""
    lines = [ln.removeprefix("would not run here: ") for ln in out.splitlines()
             if ln.startswith("would not run here: ")]
    assert len(lines) == 1, out
    return lines[0]


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


@pytest.fixture(scope="module")
def tree_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("kinds") / "r.sqlite3"
    code, out, err = _run("registry", "import", str(TREE), "--db", str(db))
    assert code == 0, out + err
    return db


LAB_ID = "ferro-gpu-24gb/wren-7b.llama.cpp-wren-7b-q4-32k.32k"


@pytest.mark.parametrize(("record", "where", "passed"), [
    ("wren-7b-native", "launch.binary + launch.arguments",
     {"ctx-size": 8192, "parallel": 1, "n-gpu-layers": 99, "flash-attn": "on"}),
    ("wren-7b-docker", "launch.arguments of docker image ghcr.io/example/llama.cpp:server@sha256:" + "0" * 63 + "1 "
     "(run natively here)", {"ctx-size": 8192, "parallel": 1, "n-gpu-layers": 99, "flash-attn": "on"}),
    ("wren-7b-script", "launch.steps", {"ctx-size": 4096, "n-gpu-layers": 99}),
    ("wren-7b-llama-bench", "metadata.localmaxxing.tokenized.arguments", {"n-gpu-layers": 99, "flash-attn": "on"}),
    (LAB_ID, "engine profile llama.cpp-wren-7b-q4-32k args (image ghcr.io/example/llama.cpp@sha256:" + "0" * 63
     + "1; frozen profile: ctx 32,768, seqs 1, vision false)",
     {"ctx-size": 32768, "n-gpu-layers": 999, "flash-attn": "auto", "parallel": 1}),
])
def test_every_launch_kind_dry_runs_as_a_local_launch(tree_db: Path, record: str, where: str,
                                                      passed: dict[str, object]) -> None:
    code, out, err = _run("reproduce", record, "--db", str(tree_db), "--dry-run", "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["launch"]["recorded_where"] == where
    assert report["launch"]["flags"] == passed
    argv = report["launch"]["argv"]
    assert "--host" in argv and argv[argv.index("--host") + 1] == "127.0.0.1"  # never the record's 0.0.0.0


def test_reproduce_takes_the_records_own_launch_before_the_argv_it_was_promoted_from(tmp_path: Path) -> None:
    """Issue 33 item 2. The wrong answer (before): the tokenized argv in metadata (what the recipe was promoted from)
    was translated and the record's own `launch.binary` + `launch.arguments` ignored; here they differ in context
    and slots, so the flags say which one was taken."""
    doc = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    tok = doc["metadata"]["servepack"]["tokenized"]["arguments"]
    tok[tok.index("--ctx-size") + 1], tok[tok.index("--parallel") + 1] = "4096", "4"
    path = tmp_path / "recipe" / "wren-7b-native.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    code, out, err = _run("reproduce", str(path), "--dry-run", "--json")
    assert code == 0, out + err
    launch = json.loads(out)["launch"]
    assert launch["recorded_where"] == "launch.binary + launch.arguments"
    assert launch["flags"]["ctx-size"] == 8192 and launch["flags"]["parallel"] == 1


def test_llama_bench_record_becomes_its_own_protocol_not_a_reverse_prompt(tree_db: Path) -> None:
    code, out, err = _run("reproduce", "wren-7b-llama-bench", "--db", str(tree_db), "--dry-run")
    assert code == 0, out + err
    assert "--reverse-prompt" not in out
    assert ("protocol: -r 5 (llama-bench repetitions: repetitions of each test (the samples per cell), not "
            "llama-server's reverse prompt)") in out
    assert "protocol: context marks 512 × 128 generated tokens @ concurrency 1; 5 samples per cell; warmup 1" in out


def test_an_endpoint_only_record_says_why_it_cannot_be_reproduced(tree_db: Path) -> None:
    code, out, _ = _run("reproduce", "wren-7b-endpoint-only", "--db", str(tree_db), "--dry-run")
    path = TREE / "recipe" / "wren-7b-endpoint-only.json"
    assert code == 0
    assert _why(out) == (
        f"{path}: cannot reproduce here because the record states no command to run: "
        "metadata.localmaxxing.tokenized states no argv (fidelity lossy; it observed 'POST "
        "http://10.0.0.5:8080/v1/chat/completions'): an endpoint-only record; launch is a reference to "
        "https://example.invalid/runs/endpoint-only with no argv")


def test_a_lab_recipe_without_its_engine_profile_says_so(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    (lab,) = (TREE / "recipes").rglob("*.json")
    assert _run("registry", "import", str(lab), "--db", str(db))[0] == 0
    code, out, _ = _run("reproduce", LAB_ID, "--db", str(db), "--dry-run")
    assert code == 0 and ("cannot reproduce here because the lab recipe's launch is rendered from engine profile "
                          "'llama.cpp-wren-7b-q4-32k', which the registry database does not hold; import the "
                          "registry's engines/ folder too") in _why(out)


WREN_7B = {"wren-7b-native", "wren-7b-docker", "wren-7b-script", "wren-7b-endpoint-only", "wren-7b-llama-bench",
           LAB_ID}


def _choose(db: Path, *args: str) -> dict[str, object]:
    code, out, err = _run("registry", "choose", *args, "--db", str(db), "--json")
    assert code == 0, out + err
    got: dict[str, object] = json.loads(out)
    return got


@pytest.mark.parametrize(("model", "how"), [("wren-7b", "model id"), ("Wren-7B", "model id"),
                                            ("acme/Wren-7B-GGUF", "alias"), ("wren-7b-q4", "alias")])
def test_choose_matches_the_model_id_or_an_alias_never_a_part_of_a_name(tree_db: Path, model: str, how: str) -> None:
    got = _choose(tree_db, model)
    ids = {c["recipe_id"] for c in got["candidates"]}  # type: ignore[attr-defined]
    # The wrong answer: wren-7b-instruct's recipe (its instance id contains "wren-7b") is not wren-7b's.
    assert ids == WREN_7B and got["matched_by"] == how
    assert {c["kind"] for c in got["candidates"]} == {"recipe", "lab_recipe"}  # type: ignore[attr-defined]


@pytest.mark.parametrize("part", ["wren", "7b", "acme", "wren-7b-gguf", "q4-k-m"])
def test_a_part_of_a_name_matches_nothing(tree_db: Path, part: str) -> None:
    code, _, err = _run("registry", "choose", part, "--db", str(tree_db))
    assert code == 2 and f"no recipe for model {part!r} in the registry (matched as a model id" in err


def test_null_concurrency_ranks_as_unknown_not_as_concurrency_1(tree_db: Path) -> None:
    got = _choose(tree_db, "wren-7b")
    order = [(c["recipe_id"], c["figure"] and c["figure"]["concurrency"],  # type: ignore[index]
              c["figure"] and c["figure"]["decode_tok_s"]) for c in got["candidates"]]  # type: ignore[attr-defined]
    # 300 tok/s at a null concurrency (maybe an aggregate of many streams) ranks after the figures of known
    # concurrency and context, never first as if it were one stream's
    assert order[:2] == [("wren-7b-native", 1, 50.0), ("wren-7b-endpoint-only", 1, 40.2)]
    assert ("wren-7b-docker", None, 300.0) in order[2:4] and (LAB_ID, 1, 61.5) in order[2:4]
    assert [o[1:] for o in order[4:]] == [(None, None), (None, None)]


def test_choose_prints_real_flags_and_never_none(tree_db: Path) -> None:
    from servepack.cli.main import all_commands

    code, out, err = _run("registry", "choose", "wren-7b", "--db", str(tree_db))
    assert code == 0, err
    assert "None" not in out
    commands = all_commands()
    real = {opt for cmd in (commands["reproduce"], commands["registry"].commands["choose"])  # type: ignore[attr-defined]
            for p in cmd.params for opt in p.opts}
    import re

    printed = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", out))
    assert printed and printed <= real, printed - real
    assert "--model " not in out  # choose's own flag is --model-file; there is no --model


V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (pk INTEGER PRIMARY KEY, id TEXT NOT NULL, version INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('recipe', 'speed_sweep')), content_sha256 TEXT NOT NULL,
    recipe_id TEXT NOT NULL, model_instance_id TEXT, hardware_id TEXT, engine TEXT, context_tokens INTEGER,
    concurrency INTEGER, UNIQUE (id, version), UNIQUE (id, content_sha256));
CREATE TABLE sources (sha256 TEXT PRIMARY KEY, record_pk INTEGER NOT NULL REFERENCES records (pk),
    bytes BLOB NOT NULL, source TEXT NOT NULL, envelope INTEGER NOT NULL, imported_at TEXT NOT NULL);
CREATE TABLE sweep_rows (record_pk INTEGER NOT NULL REFERENCES records (pk), row_index INTEGER NOT NULL,
    context_tokens INTEGER, concurrency INTEGER, output_tokens INTEGER, decode_tok_s REAL,
    decode_tok_s_per_stream REAL, prefill_tok_s REAL, ttft_ms_p50 REAL, status TEXT,
    PRIMARY KEY (record_pk, row_index));
CREATE INDEX records_model ON records (model_instance_id);
"""


def _v1_db(tmp_path: Path) -> tuple[Path, bytes]:
    """A registry written before every kind was held (version 1: recipes and sweeps, a CHECK on the kind)."""
    import hashlib

    db = tmp_path / "r.sqlite3"
    recipe = TREE / "recipe" / "wren-7b-native.json"
    raw = recipe.read_bytes()
    conn = sqlite3.connect(db)
    conn.executescript(V1_SCHEMA)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO records VALUES (1, 'wren-7b-native', 1, 'recipe', 'c', 'wren-7b-native', "
                 "'acme-wren-7b-gguf--q4-k-m', 'ferro-gpu-24gb', 'llama.cpp', 8192, 1)")
    conn.execute("INSERT INTO sources VALUES (?, 1, ?, ?, 0, '2026-09-01T00:00:00.000Z')",
                 (hashlib.sha256(raw).hexdigest(), raw, str(recipe)))
    conn.execute("PRAGMA application_id = 1397772871")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    return db, raw


def test_read_commands_on_a_version_1_database_read_it_and_write_nothing(tmp_path: Path) -> None:
    """Issue 25 item 3: list, show and choose read a version-1 file (an upgraded copy in memory) and leave its bytes
    and mtime as they were; no journal or other file is left beside it."""
    import os

    db, _raw = _v1_db(tmp_path)
    before = (db.read_bytes(), os.stat(db).st_mtime_ns, sorted(p.name for p in tmp_path.iterdir()))
    code, out, err = _run("registry", "list", "--db", str(db), "--json")
    assert code == 0, out + err
    assert [r["id"] for r in json.loads(out)["recipes"]] == ["wren-7b-native"]
    code, out, err = _run("registry", "show", "wren-7b-native", "--db", str(db), "--json")
    assert code == 0, out + err
    assert json.loads(out)["registry"]["version"] == 1
    code, out, err = _run("registry", "choose", "acme-wren-7b-gguf--q4-k-m", "--db", str(db), "--json")
    assert code == 0, out + err
    assert [c["recipe_id"] for c in json.loads(out)["candidates"]] == ["wren-7b-native"]
    assert (db.read_bytes(), os.stat(db).st_mtime_ns, sorted(p.name for p in tmp_path.iterdir())) == before
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone() == (1,)  # still version 1: nothing upgraded it


def test_a_version_1_database_is_upgraded_by_import_with_nothing_lost(tmp_path: Path) -> None:
    """The write command upgrades the file in place; its records and bytes are kept, and it then takes every kind."""
    db, raw = _v1_db(tmp_path)
    code, out, err = _run("registry", "import", str(TREE), "--db", str(db))
    assert code == 0, out + err
    assert "17 imported, 0 new versions, 1 already present" in out.splitlines()[-1]
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone() == (2,)
        assert c.execute("SELECT bytes FROM sources WHERE rowid = 1").fetchone() == (raw,)
        assert ("acme-wren-7b-gguf-q4-k-m", "instance") in c.execute("SELECT name, role FROM names").fetchall()


def test_choose_reads_the_weights_and_context_from_every_launch_form(tree_db: Path) -> None:
    got = _choose(tree_db, "wren-7b")
    by_id = {c["recipe_id"]: {k["check"]: k["detail"] for k in c["checks"]}  # type: ignore[index]
             for c in got["candidates"]}  # type: ignore[attr-defined]
    for rid in ("wren-7b-script", "wren-7b-docker", "wren-7b-native", LAB_ID):
        assert "wren-7b-Q4_K_M.gguf" in by_id[rid]["model"], rid
    assert by_id["wren-7b-script"]["context"].startswith("asked 8,192 tokens; the recipe launches with a 4,096-token")
    assert by_id[LAB_ID]["context"].endswith("(it launches with 32,768)")


@pytest.mark.parametrize("record", ["wren-7b-native", "wren-7b-endpoint-only", "wren-7b-native-sweep", "wren-arena",
                                    "ferro-gpu-24gb", "wren-7b", "acme-wren-7b-gguf--q4-k-m", LAB_ID,
                                    "llama.cpp-wren-7b-q4-32k",
                                    "ferro-gpu-24gb.wren-7b.llama.cpp-wren-7b-q4-32k.32k.20260902T100000"])
def test_registry_show_reads_every_kind(tree_db: Path, record: str) -> None:
    for args in ((), ("--json",)):
        code, out, err = _run("registry", "show", record, "--db", str(tree_db), *args)
        assert code == 0 and record in out, out + err


@pytest.mark.parametrize(("size_gb", "ok", "said"), [
    (100_000, False, "beyond this host's"),
    (0.001, None, "fit within this host's"),
])
def test_choose_weighs_the_model_instances_stated_weights_against_this_host(
        tmp_path: Path, size_gb: float, ok: bool | None, said: str) -> None:
    """With no local GGUF and no memory stated by a sweep, the weights' size the model instance states
    (weights.size_gb) still says a model cannot fit: 100,000 GB is NO here; a tiny one fits, its KV cache unknown."""
    tree = tmp_path / "tree"
    shutil.copytree(TREE, tree)
    inst = tree / "model-instance" / "acme-wren-7b-gguf--q4-k-m.json"
    doc = json.loads(inst.read_text())
    doc["weights"]["size_gb"] = size_gb
    inst.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(tree), "--db", str(db))[0] == 0
    got = _choose(db, "wren-7b")
    (endpoint,) = [c for c in got["candidates"] if c["recipe_id"] == "wren-7b-endpoint-only"]  # type: ignore[attr-defined]
    memory = {c["check"]: c for c in endpoint["checks"]}["memory"]
    # the wrong answer: "not known: ... the record states no memory figure" while its instance states the weights
    assert memory["ok"] is ok
    assert memory["detail"].startswith(f"weights {size_gb:,.2f} GB stated by model instance acme-wren-7b-gguf--q4-k-m "
                                       f"(weights.size_gb), {said}" if ok is False else
                                       f"weights {size_gb:,.2f} GB stated by model instance acme-wren-7b-gguf--q4-k-m "
                                       f"(weights.size_gb) {said}")


def test_an_endpoint_only_record_with_a_draft_launch_says_why_the_draft_is_not_run(tmp_path: Path) -> None:
    """The registry's LocalMaxxing candidates often carry a synthesized docker `draft_launch` beside a launch that
    states no argv: the message names it and why it is not the record's launch, instead of 'no command' alone."""
    doc = json.loads((TREE / "recipe" / "wren-7b-endpoint-only.json").read_text())
    image = "ghcr.io/example/llama.cpp:server@sha256:" + "0" * 63 + "2"
    doc["draft_launch"] = {"kind": "docker", "image": image, "arguments": ["-hf", "acme/Wren-7B-GGUF:Q4_K_M"],
                           "host_port": 8080, "container_port": 8080, "accelerator_backend": "nvidia",
                           "synthesized": {"template": "wren-server-v1", "generated_at": "2026-09-01T10:00:00Z",
                                           "image_provenance": "wren-7b-docker"}}
    assert list(_upstream("recipe").iter_errors(doc)) == []  # the registry's own schema accepts it
    path = tmp_path / "recipe" / "wren-7b-endpoint-only.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    code, out, _ = _run("reproduce", str(path), "--dry-run")
    assert code == 0
    assert _why(out).endswith(
        f"with no argv; its draft_launch (docker image {image}, template 'wren-server-v1') is synthesized and "
        "unverified, for the registry's acceptance harness, not the launch the record measured (the registry's "
        "recipe schema: never a launch contract), so it is not reproduced as this record")


def test_a_script_launch_with_shell_steps_under_launch_script_is_read(tmp_path: Path) -> None:
    """The registry's script launches give their steps as shell lines under launch.script.steps (prose lines too);
    the llama.cpp step among them is the launch, read as the shell splits it (env assignments dropped)."""
    doc = json.loads((TREE / "recipe" / "wren-7b-script.json").read_text())
    doc["id"] = "wren-7b-script-lines"
    doc["speed_sweep_ids"] = []
    del doc["launch"]["steps"]
    doc["launch"]["script"]["steps"] = [
        "or: run the operator image, which does every step below in order",
        "huggingface-cli download acme/Wren-7B-GGUF",
        "GGML_CUDA_NO_PINNED=1 ./build/bin/llama-server -m wren-7b-Q4_K_M.gguf -c 4096 -ngl 99 --port 8080",
    ]
    assert list(_upstream("recipe").iter_errors(doc)) == []
    folder = tmp_path / "tree" / "recipe"
    folder.mkdir(parents=True)
    shutil.copy(TREE / "model-instance" / "acme-wren-7b-gguf--q4-k-m.json", tmp_path / "tree")
    (folder / "wren-7b-script-lines.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(tmp_path / "tree"), "--db", str(db))[0] == 0
    code, out, err = _run("reproduce", "wren-7b-script-lines", "--db", str(db), "--dry-run", "--json")
    # the wrong answer: "cannot reproduce here because ... no llama.cpp step in launch.steps"
    assert code == 0, out + err
    launch = json.loads(out)["launch"]
    assert launch["recorded_where"] == "launch.script.steps"
    assert launch["flags"] == {"ctx-size": 4096, "n-gpu-layers": 99}
    got = _choose(db, "wren-7b")
    (cand,) = got["candidates"]  # type: ignore[misc]
    checks = {c["check"]: c["detail"] for c in cand["checks"]}
    assert "the record names wren-7b-Q4_K_M.gguf" in checks["model"]
    assert "the recipe launches with a 4,096-token context" in checks["context"]
    doc["launch"]["script"]["steps"] = ["./start.sh build", "./start.sh serve"]
    (folder / "wren-7b-script-lines.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    code, out, _ = _run("reproduce", str(folder / "wren-7b-script-lines.json"), "--dry-run")
    assert code == 0 and ("launch is script 'example/wren-scripts/1111111111111111111111111111111111111111/serve.sh': "
                          "no step of launch.script.steps starts a llama.cpp tool ('./start.sh build'; "
                          "'./start.sh serve')") in _why(out)
