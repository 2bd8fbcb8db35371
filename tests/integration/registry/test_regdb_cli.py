"""The local registry end to end, on a real SQLite file: import (seed envelope, fixture, an export of a fake run,
folders), refusals one by one, idempotence and versions, a database from the future, list, show, choose, compare."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from core_fixtures import make_pack, write_fake_server_bin

import servepack.registry.host_facts as host_facts_mod
from servepack.cli.main import cli
from servepack.host.fingerprint import detected_hardware_id, fingerprint
from servepack.registry import lookup

SEED = Path("/work/shared/seeds/004_af61b7e57142d640.txt")
FIXTURE = Path(__file__).parents[2] / "fixtures" / "registry" / "laguna_dgx_spark_record.json"
SEED_ID = "laguna-s-2-1-q4-k-m-dgx-spark-gb10-128gb-llama-cpp-tp1"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("servepack: ")]


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A bench of the tiny pack against the fake llama-server (real HTTP on loopback), exported as records."""
    root = tmp_path_factory.mktemp("fakerun")
    pack = make_pack(root)
    server = write_fake_server_bin(root)
    run = root / "run"
    code, out, err = _run("bench", str(pack), "--server-bin", str(server), "--prompt-tokens", "40",
                          "--prompt-tokens", "120", "--gen-tokens", "16", "--samples", "3", "--out", str(run))
    assert code == 0, out + err
    code, out, err = _run("registry", "export", str(run), "--out", str(root / "export"), "--json")
    assert code == 0, out + err
    paths = json.loads(out)
    return {"run": run, "recipe": Path(paths["recipe"]), "sweep": Path(paths["speed_sweep"]),
            "export": root / "export", "model": root / "tiny.gguf", "server": server}


def _rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, args).fetchall()


def test_import_keeps_bytes_verbatim_with_provenance(fake_run: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(SEED), str(fake_run["recipe"]), str(fake_run["sweep"]),
                          "--db", str(db))
    assert code == 0, out + err
    assert out.splitlines()[-1].startswith("3 imported, 0 new versions, 0 already present, 0 skipped, 0 refused")
    for path in (SEED, fake_run["recipe"], fake_run["sweep"]):
        raw = path.read_bytes()
        (row,) = _rows(db, "SELECT bytes, source, imported_at FROM sources WHERE sha256 = ?",
                       hashlib.sha256(raw).hexdigest())
        assert row[0] == raw  # the exact bytes as read, the envelope included
        assert row[1] == str(path.absolute()) and row[2].endswith("Z")
    assert _rows(db, "PRAGMA user_version") == [(2,)]
    indexed = _rows(db, "SELECT model_instance_id, hardware_id, engine, context_tokens, concurrency FROM records "
                    "WHERE id = ?", SEED_ID)
    assert indexed == [("poolside-laguna-s-2-1-gguf--q4-k-m", "dgx-spark-gb10-128gb", "llama.cpp", 9280, 1)]
    sweep_id = json.loads(fake_run["sweep"].read_bytes())["id"]
    cells = _rows(db, "SELECT w.context_tokens, w.concurrency FROM sweep_rows w JOIN records r ON r.pk = w.record_pk "
                  "WHERE r.id = ? ORDER BY w.context_tokens", sweep_id)
    assert [c[1] for c in cells] == [1, 1] and cells[0][0] < cells[1][0]
    loaded = lookup(db, SEED_ID)  # the public look-up other code uses
    assert loaded.kind == "recipe" and loaded.envelope_meta == {"source": "registry"}
    assert loaded.path == SEED.absolute() and "relationships" in loaded.api_fields


def test_reimport_is_idempotent_and_a_changed_record_is_a_new_version(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(SEED), "--db", str(db))[0] == 0
    code, out, _ = _run("registry", "import", str(SEED), str(FIXTURE), "--db", str(db))
    assert code == 0
    assert out.splitlines()[0].startswith(f"already present: {SEED} (recipe {SEED_ID} version 1")
    assert out.splitlines()[-1].startswith("0 imported, 0 new versions, 2 already present")
    assert _rows(db, "SELECT count(*) FROM sources") == [(1,)]  # nothing written twice
    # The same record in other bytes (stored form, reformatted): another source of version 1.
    stored = json.loads(SEED.read_bytes())["data"]
    for k in ("huggingface", "registry", "relationships"):
        stored.pop(k)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(stored, indent=2, sort_keys=True, ensure_ascii=False))
    code, out, _ = _run("registry", "import", str(plain), "--db", str(db))
    assert code == 0 and out.startswith(f"already present: recipe {SEED_ID} version 1 (same record in other bytes")
    # Different content under the same id: version 2, read from then on; version 1 is kept.
    changed = copy.deepcopy(stored)
    changed["serving"]["max_context_tokens"] = 16384
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(changed))
    code, out, _ = _run("registry", "import", str(newer), "--db", str(db))
    assert code == 0 and out.startswith(f"imported recipe {SEED_ID} as version 2 from {newer}")
    assert lookup(db, SEED_ID).record["serving"]["max_context_tokens"] == 16384
    assert lookup(db, SEED_ID, 1).record["serving"]["max_context_tokens"] == 9280
    code, out, _ = _run("registry", "show", SEED_ID, "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["serving"]["max_context_tokens"] == 16384
    assert _rows(db, "SELECT count(*), max(version) FROM records WHERE id = ?", SEED_ID) == [(2, 2)]


def _bad_files(tmp_path: Path, recipe: Path) -> dict[str, tuple[Path, str]]:
    """Each kind of invalid input, with the text its one-line refusal must contain."""
    good = json.loads(recipe.read_bytes())
    d = tmp_path / "bad"
    d.mkdir()
    out = {}
    p = d / "not_json.json"
    p.write_bytes(b'{"schema_version": "local-ai-registry/v1", "id": ')
    out["not json"] = (p, f"{p}: not a JSON registry record")
    p = d / "wrong_version.json"
    p.write_text(json.dumps({**good, "schema_version": "local-ai-registry/v0"}))
    out["schema version"] = (p, f"{p}: schema_version 'local-ai-registry/v0' is not 'local-ai-registry/v1'")
    p = d / "missing.json"
    p.write_text(json.dumps({k: v for k, v in good.items() if k != "hardware_id"}))
    out["missing field"] = (p, f"{p}: recipe breaks the registry's rule: (top level): 'hardware_id' is a required "
                               "property (upstream schema recipe.schema.json)")
    p = d / "schema.json"
    p.write_text(json.dumps({**good, "hardware_count": "one"}))
    out["fails schema"] = (p, f"{p}: recipe breaks the registry's rule: hardware_count: 'one' is not of type "
                              "'integer' (upstream schema recipe.schema.json)")
    p = d / "huge.json"
    p.write_bytes(b" " * ((4 << 20) + 1))
    out["too large"] = (p, f"{p}: larger than 4 MiB; not a registry record")
    link = d / "link-to-huge.json"
    link.symlink_to(p)
    out["symlink to a huge file"] = (link, f"{link}: larger than 4 MiB; not a registry record")
    fifo = d / "fifo.json"
    os.mkfifo(fifo)  # would block a plain open() for reading forever
    out["not a regular file"] = (fifo, f"{fifo}: not a regular file")
    p = d / "hardware.json"
    p.write_text(json.dumps({"schema_version": "local-ai-registry/v1", "id": "rtx-4090-24gb", "vendor": "nvidia",
                             "accelerator_backend": "nvidia"}))
    out["other kind, breaking its rules"] = (p, f"{p}: hardware breaks the registry's rule: (top level): 'name' is a "
                                                "required property (upstream schema hardware.schema.json)")
    p = d / "no-record.json"
    p.write_text(json.dumps({"collections": {}}))
    out["no record at all, named"] = (p, f"{p}: not a record of a kind the registry defines")
    return out


def test_each_invalid_file_is_refused_on_one_line_and_the_batch_goes_on(fake_run: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    bad = _bad_files(tmp_path, fake_run["recipe"])
    files = [str(p) for p, _ in bad.values()]
    code, out, err = _run("registry", "import", files[0], str(SEED), *files[1:], str(fake_run["sweep"]),
                          "--db", str(db))
    assert code == 1  # some refused, the rest imported; 2 is for wrong arguments
    refusals = [line for line in _errors(err) if line.startswith("servepack: refused ")]
    assert len(refusals) == len(bad)
    for (path, expect), line in zip(bad.values(), refusals, strict=True):
        assert line.startswith(f"servepack: refused {path}: ")
        assert expect in line, (expect, line)
    assert _errors(err)[-1] == (f"servepack: error: {len(bad)} of {len(bad) + 2} files refused (each named above "
                                "with the registry rule it breaks); the others were imported")
    assert out.splitlines()[-1].startswith(f"2 imported, 0 new versions, 0 already present, 0 skipped, "
                                           f"{len(bad)} refused")
    assert {r[0] for r in _rows(db, "SELECT kind FROM records")} == {"recipe", "speed_sweep"}


def test_a_path_named_that_is_not_there_is_a_wrong_argument_before_any_import(tmp_path: Path) -> None:
    """It was "refused … no such file" among the batch, exit 1, the rest imported and the database made: a path
    given on the command line that is not there is a wrong argument, one line, exit 2, nothing imported, no
    database. Files found inside a folder keep the batch rule (the folder's bad file refused, exit 1)."""
    db = tmp_path / "r.sqlite3"
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "recipe.json").write_bytes(FIXTURE.read_bytes())
    (folder / "broken.json").write_bytes(b'{"schema_version": "local-ai-registry/v1", "id": ')
    absent, gone = tmp_path / "no-such.json", tmp_path / "gone.json"
    gone.symlink_to(tmp_path / "nowhere.json")
    cases = [
        ([str(FIXTURE), str(absent)], f"servepack: error: {absent}: no such file or folder; name record files or "
                                      "folders that exist (nothing was imported)"),
        ([str(folder), str(absent / "x.json"), str(gone)],
         f"servepack: error: {absent / 'x.json'}: no such file or folder (and 1 more of the paths named); name "
         "record files or folders that exist (nothing was imported)"),
        ([str(gone), str(FIXTURE)], f"servepack: error: {gone}: a symbolic link to nothing; name record files or "
                                    "folders that exist (nothing was imported)"),
    ]
    for paths, line in cases:
        code, out, err = _run("registry", "import", *paths, "--db", str(db))
        assert (code, out, err.splitlines()) == (2, "", [line])
        assert not db.exists()  # not created, let alone written
    # the wrong answer guarded against: the same folder alone imports its good record and refuses its broken one
    code, out, err = _run("registry", "import", str(folder), "--db", str(db))
    assert code == 1 and _errors(err)[0].startswith(f"servepack: refused {folder / 'broken.json'}: ")
    assert out.splitlines()[-1].startswith("1 imported, 0 new versions, 0 already present, 0 skipped, 1 refused")
    assert _rows(db, "SELECT count(*) FROM records") == [(1,)]


def test_a_folder_is_walked(fake_run: dict[str, Path], tmp_path: Path) -> None:
    tree = tmp_path / "checkout" / "registry"
    (tree / "recipe").mkdir(parents=True)
    (tree / "speed-sweep").mkdir()
    (tree / "hardware").mkdir()
    (tree / "recipe" / f"{SEED_ID}.json").write_bytes(SEED.read_bytes())
    (tree / "hardware" / "dgx-spark-gb10-128gb.json").write_text(json.dumps({
        "schema_version": "local-ai-registry/v1", "id": "dgx-spark-gb10-128gb", "vendor": "nvidia", "name": "GB10",
        "kind": "unified", "accelerator_backend": "nvidia", "sources": [{"kind": "test", "url": "https://x.invalid"}],
        "memory": {"vram_gb": 128, "vram_type": None, "bandwidth_gb_per_s": 273, "cpu_memory_gb": None}}))
    (tree / "index").mkdir()
    (tree / "index" / "collections.json").write_text(json.dumps({"collections": {}, "counts": {}}))
    (tree / "README.md").write_text("not a record")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.json").write_bytes(fake_run["recipe"].read_bytes())
    (tree / "linked").symlink_to(elsewhere, target_is_directory=True)
    db = tmp_path / "r.sqlite3"
    # servepack's own export layout (recipe/, speed-sweep/) and the registry's, in one call
    code, out, err = _run("registry", "import", str(tmp_path / "checkout"), str(fake_run["export"]), "--db", str(db))
    assert code == 0, out + err
    lines = out.splitlines()
    assert f"skipped {tree / 'linked'}: a symlinked folder, not followed" in lines
    assert f"imported hardware dgx-spark-gb10-128gb from {tree / 'hardware' / 'dgx-spark-gb10-128gb.json'}" in lines
    assert f"skipped {tree / 'index' / 'collections.json'}: not a record of a kind the registry defines (an index, " \
           "schema, asset, price or other JSON)" in lines
    assert not any("README" in line for line in lines)
    # 2 here + what an export of a CPU box writes: model, model instance, its lab run, servepack's recipe and sweep
    assert lines[-1].startswith("7 imported, 0 new versions, 0 already present, 2 skipped, 0 refused; by kind: "
                                "2 recipes, 1 speed sweeps, 1 hardware, 1 models, 1 model instances, 1 lab runs;")


def test_interrupt_or_crash_mid_import_leaves_the_database_whole(fake_run: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(SEED), "--db", str(db))[0] == 0
    script = """
import os, sys
from pathlib import Path
import servepack.registry.db as d
import servepack.registry.storing as storing
from servepack.registry.ingest import import_paths
mode, db, path = sys.argv[1:]
def stop():  # called inside the transaction, after the record row and before its bytes are written
    if mode == "interrupt":
        raise KeyboardInterrupt
    os._exit(9)
storing.utc_now = stop
with d.RegistryDB.open(Path(db)) as opened:
    try:
        import_paths(opened, [Path(path)])
    except KeyboardInterrupt:
        print("interrupted")
"""
    for mode, rc in (("interrupt", 0), ("crash", 9)):
        done = subprocess.run([sys.executable, "-c", script, mode, str(db), str(fake_run["recipe"])],
                              capture_output=True, text=True, timeout=60, env=dict(os.environ))
        assert done.returncode == rc, done.stderr
        assert _rows(db, "PRAGMA integrity_check") == [("ok",)]
        assert _rows(db, "SELECT id FROM records") == [(SEED_ID,)]  # the half-written record is gone
        assert _rows(db, "SELECT count(*) FROM sources") == [(1,)]
    code, out, _ = _run("registry", "import", str(fake_run["recipe"]), "--db", str(db))
    assert code == 0 and out.startswith("imported recipe ")


def test_a_database_from_a_newer_servepack_or_of_another_kind_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(SEED), "--db", str(db))[0] == 0
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 7")
    for args in (("import", str(FIXTURE)), ("list",), ("show", SEED_ID), ("choose", "laguna")):
        code, _, err = _run("registry", *args, "--db", str(db))
        assert code == 2 and _errors(err) == [
            f"servepack: error: {db}: registry schema version 7 was written by a newer servepack (this one, "
            f"{_version()}, reads up to 2); upgrade servepack or give --db another path"], args
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    code, _, err = _run("registry", "list", "--db", str(other))
    assert code == 2 and "an SQLite database of another application" in _errors(err)[0]
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database at all" * 100)
    code, _, err = _run("registry", "import", str(SEED), "--db", str(garbage))
    assert code == 2 and _errors(err)[0].startswith(f"servepack: error: {garbage}: not a servepack registry database")
    code, _, err = _run("registry", "list", "--db", str(tmp_path / "none.sqlite3"))
    assert code == 2 and "no registry database here" in _errors(err)[0]


def _version() -> str:
    from servepack import __version__
    return __version__


def _variant(src: Path, out: Path, rid: str, **changes: Any) -> dict[str, Any]:
    doc = json.loads(src.read_bytes())
    doc.update(changes)
    doc["id"] = rid
    (out / f"{rid}.json").write_text(json.dumps(doc))
    return doc


def _two_recipes(fake_run: dict[str, Path], tmp_path: Path) -> tuple[Path, str, str]:
    """Two recipes of the fake run's model on this host: `fast` leads at the small context, `slow` at the large."""
    here = detected_hardware_id(fingerprint())
    recipe = json.loads(fake_run["recipe"].read_bytes())
    sweep = json.loads(fake_run["sweep"].read_bytes())
    d = tmp_path / "variants"
    (d / "recipe").mkdir(parents=True)
    (d / "speed-sweep").mkdir()
    small, large = sorted(r["context_tokens"] for r in sweep["rows"])
    for rid, at_small, at_large in (("tiny-fast", 50.0, 10.0), ("tiny-slow", 20.0, 30.0)):
        _variant(fake_run["recipe"], d / "recipe", rid, hardware_id=here, speed_sweep_ids=[f"{rid}-sweep"])
        rows = copy.deepcopy(sweep["rows"])
        for row in rows:
            row["decode_tok_s"] = row["decode_tok_s_per_stream"] = at_small if row["context_tokens"] == small \
                else at_large
        _variant(fake_run["sweep"], d / "speed-sweep", f"{rid}-sweep", recipe_id=rid, rows=rows)
    assert recipe["model_instance_id"] == "tiny"
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(d), str(SEED), "--db", str(db))
    assert code == 0, out + err
    return db, str(small), str(large)


def test_choose_ranks_by_decode_at_the_context_and_says_why(fake_run: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEPACK_LLAMA_SERVER", str(fake_run["server"]))
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(host_facts_mod, "hf_hub_cache", lambda: tmp_path / "hf")
    db, small, large = _two_recipes(fake_run, tmp_path)
    code, out, err = _run("registry", "choose", "tiny", "--db", str(db), "--context", small, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert [c["recipe_id"] for c in got["candidates"]] == ["tiny-fast", "tiny-slow"]
    assert got["candidates"][0]["figure"] == {"decode_tok_s": 50.0, "context_tokens": int(small), "concurrency": 1,
                                              "source": "speed sweep tiny-fast-sweep", "at_requested_context": True,
                                              "reported": False}
    code, out, _ = _run("registry", "choose", "tiny", "--db", str(db), "--context", large, "--json")
    assert [c["recipe_id"] for c in json.loads(out)["candidates"]] == ["tiny-slow", "tiny-fast"]
    # Nearest measured context where none is exact, and it says so.
    code, out, _ = _run("registry", "choose", "tiny", "--db", str(db), "--context", str(int(small) + 1), "--json")
    fig = json.loads(out)["candidates"][0]["figure"]
    assert fig["context_tokens"] == int(small) and fig["at_requested_context"] is False
    # No weights known yet: not runnable, and the model check says which file and pin it wants.
    checks = {c["check"]: c for c in got["candidates"][0]["checks"]}
    assert checks["hardware"]["ok"] is True and checks["engine"]["ok"] is True
    assert "(version: 1 (abc1234)" in checks["engine"]["detail"]
    assert checks["model"]["ok"] is False and "no local file: the record names tiny.gguf" in checks["model"]["detail"]
    assert got["candidates"][0]["runnable"] == "no" and got["best_runnable"] is None
    # The pinned file in servepack's cache: runnable, memory sized from the GGUF.
    sha = hashlib.sha256(fake_run["model"].read_bytes()).hexdigest()
    cached = tmp_path / "cache" / "models" / sha / "tiny.gguf"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(fake_run["model"].read_bytes())
    code, out, _ = _run("registry", "choose", "tiny", "--db", str(db), "--context", small)
    assert code == 0
    assert f"   ok model: {cached} has the pinned sha256 {sha[:12]}… (servepack cache" in out
    # The tiny GGUF's header has no attention shapes: its weights fit, its KV cache is unknown, so memory is
    # unknown and nothing is called runnable (issue 33: it was "ok memory" on the weights alone, and best runnable).
    assert "   ok memory:" not in out
    assert "   ?? memory: GGUF 0.00 GiB within" in out and "the KV cache at " in out
    assert out.splitlines()[-2:] == ["nothing is runnable here: every recipe above fails or leaves unknown a check "
                                     "(memory)",
                                     "to see one's launch and protocol anyway: servepack reproduce tiny-fast "
                                     "--dry-run --db DB"]
    # Other bytes under the pinned name: refused as other weights (the wrong answer must not pass).
    wrong = tmp_path / "tiny.gguf"
    wrong.write_bytes(fake_run["model"].read_bytes() + b"\0")
    code, out, _ = _run("registry", "choose", "tiny", "--db", str(db), "--model-file", str(wrong), "--json")
    checks = {c["check"]: c for c in json.loads(out)["candidates"][0]["checks"]}
    assert checks["model"]["ok"] is False and checks["model"]["detail"].endswith(f"pins {sha[:12]}…: other weights")
    # An engine servepack does not drive.
    monkeypatch.setenv("SERVEPACK_LLAMA_SERVER", str(tmp_path / "missing-llama-server"))
    code, out, _ = _run("registry", "choose", "tiny", "--db", str(db), "--json")
    checks = {c["check"]: c for c in json.loads(out)["candidates"][0]["checks"]}
    assert checks["engine"]["ok"] is False and "missing-llama-server is not an executable file" in \
        checks["engine"]["detail"]


def test_choose_for_the_seed_explains_why_nothing_runs_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = detected_hardware_id(fingerprint())
    if host == "dgx-spark-gb10-128gb":
        pytest.skip("this machine is a DGX Spark")
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(host_facts_mod, "hf_hub_cache", lambda: tmp_path / "hf")
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(SEED), "--db", str(db))[0] == 0
    code, out, _ = _run("registry", "choose", "Laguna-S-2.1", "--db", str(db))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("recipes for Laguna-S-2.1 (matched by model id), ranked")
    assert lines[1].startswith(f"1. {SEED_ID}: decode 19.30 tok/s at 8,192 context, concurrency 1 (as asked; the "
                               "record's notes")
    assert lines[1].endswith("· NOT runnable here")
    assert lines[2].startswith(f"   NO hardware: recorded on dgx-spark-gb10-128gb ×1; this host is {host} (")
    assert lines[4] == ("   NO model: no local file: the record names laguna-s-2.1-Q4_K_M.gguf and pins "
                        "7da520c5f44b…; pull it (the HF cache or servepack's cache) or pass --model-file F")
    assert lines[5].startswith("   ?? memory: not known: no local GGUF to read sizes from")
    assert lines[6] == "   ok context: asked 8,192 tokens; the record measured up to 8,192, launches with 9,280"
    assert lines[-2].startswith("nothing is runnable here: ")
    assert lines[-1] == f"to see one's launch and protocol anyway: servepack reproduce {SEED_ID} --dry-run --db DB"
    assert "None" not in out
    # more context than the record measured: flagged, not "ok"; more than its launch holds: not runnable
    code, out, _ = _run("registry", "choose", "Laguna-S-2.1", "--db", str(db), "--context", "9000", "--json")
    checks = {c["check"]: c for c in json.loads(out)["candidates"][0]["checks"]}
    assert checks["context"]["ok"] is None and checks["context"]["detail"] == (
        "asked 9,000 tokens; the record measured up to 8,192 only: speed and memory beyond that were never measured")
    code, out, _ = _run("registry", "choose", "Laguna-S-2.1", "--db", str(db), "--context", "32768", "--json")
    checks = {c["check"]: c for c in json.loads(out)["candidates"][0]["checks"]}
    assert checks["context"]["ok"] is False and checks["context"]["detail"].startswith(
        "asked 32,768 tokens; the recipe launches with a 9,280-token context: as recorded it cannot hold that")
    code, out, _ = _run("registry", "choose", "Laguna-S-2.1", "--db", str(db), "--hardware", "detected")
    assert out.splitlines()[-2:] == ["left out by --hardware: recipes for this model on dgx-spark-gb10-128gb",
                                     "no recipe for this model on that hardware"]
    code, _, err = _run("registry", "choose", "no-such-model", "--db", str(db))
    assert code == 2 and "no recipe for model 'no-such-model'" in _errors(err)[0]


def test_list_filters(fake_run: dict[str, Path], tmp_path: Path) -> None:
    db, _, _ = _two_recipes(fake_run, tmp_path)

    def ids(*args: str) -> list[str]:
        code, out, err = _run("registry", "list", "--db", str(db), "--json", *args)
        assert code == 0, err
        return [r["id"] for r in json.loads(out)["recipes"]]

    assert ids() == [SEED_ID, "tiny-fast", "tiny-slow"]
    assert ids("--model", "laguna-s-2.1") == [SEED_ID]
    assert ids("--model", "tiny") == ["tiny-fast", "tiny-slow"]
    assert ids("--hardware", "detected") == ["tiny-fast", "tiny-slow"]
    assert ids("--hardware", "dgx-spark-gb10-128gb") == [SEED_ID]
    assert ids("--engine", "LLAMA.CPP") == [SEED_ID, "tiny-fast", "tiny-slow"]
    assert ids("--engine", "vllm") == []
    assert ids("--context", "9000") == [SEED_ID]
    assert ids("--context", "9281") == []
    code, out, _ = _run("registry", "list", "--db", str(db), "--json", "--model", "tiny")
    assert [s["id"] for s in json.loads(out)["recipes"][0]["speed_sweeps"]] == ["tiny-fast-sweep"]
    code, out, _ = _run("registry", "list", "--db", str(db))
    assert code == 0 and out.splitlines()[-1].startswith("3 recipes shown; the database holds 3 recipes, 2 speed")


def test_show_and_compare_take_an_id(fake_run: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(SEED), "--db", str(db))[0] == 0
    by_file = _run("registry", "show", str(FIXTURE), "--json")
    by_id = _run("registry", "show", SEED_ID, "--db", str(db), "--json")
    assert by_file[0] == by_id[0] == 0
    a, b = json.loads(by_file[1]), json.loads(by_id[1])
    assert a.pop("path") == str(FIXTURE) and b.pop("path") == str(SEED.absolute())
    held = b.pop("registry")
    assert (held["version"], held["versions"]) == (1, 1) and "registry" not in a
    assert held["sources"][0]["sha256"] == hashlib.sha256(SEED.read_bytes()).hexdigest()
    assert a == b
    code, out, _ = _run("registry", "show", SEED_ID, "--db", str(db))
    assert code == 0 and out.startswith(f"held in the registry as version 1 of 1: imported from {SEED.absolute()} at ")
    code, _, err = _run("registry", "show", "no-such-id", "--db", str(db))
    assert code == 2 and _errors(err) == [f"servepack: error: no-such-id: no such file, and no record with that id "
                                          f"in the registry at {db}; `servepack registry list` shows the ids"]
    run = str(fake_run["run"])
    by_file = _run("compare", run, str(FIXTURE), "--json")
    by_id = _run("compare", run, SEED_ID, "--db", str(db), "--json")
    assert by_file[0] == by_id[0] == 0
    a, b = json.loads(by_file[1]), json.loads(by_id[1])
    a.pop("record"), b.pop("record")
    assert a == b and a["verdicts"][0]["metric"] == "decode_tok_s"
