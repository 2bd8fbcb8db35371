"""The registry database's indexed context and concurrency of a lab recipe (`records.context_tokens`,
`records.concurrency`) are those of its launch as the lab renders it from its engine profile, whichever of the two
was imported first: the <n>k of the recipe's file name only while its profile is not held.

The trees are written here for this test (a fictitious "larkserve" engine), none copied."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from servepack.cli.main import cli

CARD = "ferro-gpu-24gb"
DIGEST = "9e8d7c6b5a4f" + "1" * 52
PROFILE: dict[str, Any] = {
    "id": "larkserve-exl3", "image": f"ghcr.io/example/larkserve@sha256:{DIGEST}", "backend": "nvidia",
    "port": 5000, "shm": "8g", "entrypoint": "/opt/venv/bin/python3", "args": ["main.py", "--config", "/c.yml"],
    "weights_at": "/models/${name}", "config_at": "/c.yml",
    "defaults": {"ctx": 32768, "seqs": 1, "cache": "Q4", "draft": "none", "vision": False},
    "config": ["max_seq_len: ${ctx}", "max_batch: ${seqs}"],
}
PROOF = [{"at": "2026-11-02", "on": "owner", "gpu": "Ferro GPU 24GB",
          "gates": "load chat reasoning tools context speed", "tps": 28.0, "prefill": 650, "served": "lark-4b"}]
SETS = "lark-4b.larkserve-exl3.32k"  # the file name says 32k; it sets ctx 65536 and seqs 2
BARE = "lark-4b-base.larkserve-exl3.64k"  # the file name says 64k; it sets nothing: the profile's 32768


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result.stdout


def _recipe(model: str, sets: dict[str, Any]) -> dict[str, Any]:
    return {"model": model, "weights": "acme/Lark-4B-exl3@" + "6" * 40, "engine": f"larkserve-exl3@{DIGEST[:12]}",
            "set": sets, "card": CARD, "proof": PROOF}


def _recipes(root: Path) -> Path:
    folder = root / "recipes" / CARD
    folder.mkdir(parents=True)
    for stem, doc in ((SETS, _recipe("lark-4b", {"ctx": 65536, "seqs": 2})), (BARE, _recipe("lark-4b-base", {}))):
        (folder / f"{stem}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return root / "recipes"


def _engines(root: Path, profile: dict[str, Any] = PROFILE) -> Path:
    folder = root / "engines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{profile['id']}.json").write_text(json.dumps(profile, indent=2) + "\n")
    return folder


def _import(db: Path, *paths: Path) -> None:
    out = _run("registry", "import", *map(str, paths), "--db", str(db))
    assert " 0 refused" in out, out


def _columns(db: Path) -> dict[str, tuple[int | None, int | None]]:
    """The raw index columns, every version: id → (context_tokens, concurrency) of its newest version."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, context_tokens, concurrency FROM records WHERE kind = 'lab_recipe' "
                            "ORDER BY version").fetchall()
    return {rid.split("/", 1)[1]: (ctx, conc) for rid, ctx, conc in rows}


def _listed(db: Path) -> dict[str, tuple[int | None, int | None]]:
    """What `registry list --json` says (read through the rendered launch)."""
    recipes = json.loads(_run("registry", "list", "--db", str(db), "--json"))["recipes"]
    return {r["id"].split("/", 1)[1]: (r["context_tokens"], r["concurrency"]) for r in recipes
            if r["kind"] == "lab_recipe"}


RENDERED = {SETS: (65536, 2), BARE: (32768, 1)}


def test_recipes_imported_before_their_profile_are_updated_when_it_comes(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    _import(db, _recipes(tmp_path / "tree"))
    assert _columns(db) == {SETS: (32768, 1), BARE: (65536, 1)}  # no profile yet: the file names' <n>k
    _import(db, _engines(tmp_path / "tree"))
    # the wrong answer: the file names' 32k and 64k kept in the column while every read says otherwise
    assert _columns(db) == RENDERED == _listed(db)


def test_recipes_imported_after_their_profile_are_indexed_from_it(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    _import(db, _engines(tmp_path / "tree"))
    _import(db, _recipes(tmp_path / "tree"))
    assert _columns(db) == RENDERED == _listed(db)


def test_one_import_of_the_whole_tree_indexes_from_the_profile(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    _recipes(tmp_path / "tree")
    _engines(tmp_path / "tree")
    _import(db, tmp_path / "tree")  # engines/ is walked before recipes/; the other order is the first test's
    assert _columns(db) == RENDERED == _listed(db)


def test_a_new_version_of_the_profile_reindexes_its_recipes(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    _import(db, _recipes(tmp_path / "tree"), _engines(tmp_path / "tree"))
    wider = {**PROFILE, "defaults": {**PROFILE["defaults"], "ctx": 49152}}
    _import(db, _engines(tmp_path / "v2", wider))
    assert _columns(db) == {SETS: (65536, 2), BARE: (49152, 1)} == _listed(db)  # set wins; the default moved
    broken = {**PROFILE, "config": [*PROFILE["config"], "rope: ${rope}"]}  # a placeholder nothing fills
    _import(db, _engines(tmp_path / "v3", broken))
    # its launch cannot be rendered: context and concurrency unknown, not the file name's nor the last version's
    assert _columns(db) == {SETS: (None, None), BARE: (None, None)} == _listed(db)


def test_a_database_indexed_before_this_is_put_right_by_importing_the_profile_again(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite3"
    _import(db, _recipes(tmp_path / "tree"), _engines(tmp_path / "tree"))
    with sqlite3.connect(db) as conn:  # as an older servepack left it: the file names' <n>k
        conn.execute("UPDATE records SET context_tokens = 32768 WHERE id LIKE '%.32k'")
        conn.execute("UPDATE records SET context_tokens = 65536, concurrency = 1 WHERE id LIKE '%.64k'")
    _import(db, _engines(tmp_path / "tree"))  # the same bytes: already present, and its recipes indexed again
    assert _columns(db) == RENDERED
