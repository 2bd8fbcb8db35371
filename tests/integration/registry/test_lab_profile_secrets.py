"""Issue 25 item 7: a lab engine profile's config may hold a YAML line `admin_key: sk-…` or `api_key: x` (unquoted,
any length). `registry show <profile id>`, `registry show FILE`, the recipe's rendered launch, `reproduce
--dry-run` and the database never show the value: the one rule (servepack.redact) reads `name: value` lines by name.
`tokens: 512` is a count and `disable_auth: false` a switch: both are shown as they are.

The wrong answer (servepack before this rule): every one of these printed the config lines verbatim, keys included.
The profiles and recipes are written here for this test (a fictitious "wrenserve" engine on a "ferro" card)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.redact import REDACTED

CARD = "ferro-gpu-24gb"
DIGEST = "0a1b2c3d4e5f" + "7" * 52
ADMIN = "sk-admin-4f9c2e71d0"  # long: by value too
SHORT = "x"  # one character: only its name can say it is a key
NUMERIC = "9753108"
BLOCK = "pw-block-88e1"  # the value of `password: |`, on the line below
FROZEN_KEY = "sk-frozen-6d2b"
SECRETS = [ADMIN, NUMERIC, BLOCK, FROZEN_KEY]
TEMPLATE: dict[str, Any] = {
    "id": "wrenserve-exl3",
    "about": "Wrenserve on an EXL3 backend (fictitious)",
    "image": f"ghcr.io/example/wrenserve@sha256:{DIGEST}",
    "backend": "nvidia", "port": 5000, "shm": "8g",
    "entrypoint": "/opt/venv/bin/python3",
    "args": ["main.py", "--config", "/app/config.yml"],
    "weights_at": "/workspace/models/${name}",
    "config_at": "/app/config.yml",
    "defaults": {"ctx": 32768, "seqs": 1, "cache": "Q4"},
    "config": ["model:", "  model_name: ${name}", "  max_seq_len: ${ctx}", "  cache_mode: ${cache}",
               "network:", f"  admin_key: {ADMIN}  # the admin's", f"  api_key: {SHORT}", f"  token: {NUMERIC}",
               "  tokens: 512", "  disable_auth: false", "  password: |", f"    {BLOCK}", "sampling: {}"],
}
FROZEN: dict[str, Any] = {  # llama.cpp, so `reproduce` translates its launch
    "id": "llama.cpp-wren-frozen", "engine": "llama.cpp", "image": f"ghcr.io/example/llama.cpp@sha256:{DIGEST}",
    "entrypoint": None, "args": ["-m", "/models/wren-7b-Q4_K_M.gguf", "--port", "8080", "--ctx-size", "16384"],
    "ctx": 16384, "seqs": 1, "vision": False,
    "config": {"at": "/app/config.yml", "text": f"network:\n  admin_key: '{FROZEN_KEY}'\n  api_key: y\n"
                                                "  tokens: 512\n"},
}
PROOF = [{"at": "2026-09-05", "on": "owner", "gpu": "Ferro GPU 24GB",
          "gates": "load chat reasoning tools context speed", "tps": 41.0, "prefill": 900, "served": "wren-7b"}]


def _recipe(profile: dict[str, Any]) -> dict[str, Any]:
    return {"model": "wren-7b", "weights": "acme/Wren-7B-exl3@" + "2" * 40, "engine": f"{profile['id']}@0a1b2c3d4e5f",
            "set": {}, "card": CARD, "proof": PROOF}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code in (0, 1, 2), result.exception  # never an unhandled error (exit 70)
    return result.exit_code, result.stdout + result.stderr


def _clean(out: str) -> None:
    for value in SECRETS:
        assert value not in out
    assert f"api_key: {SHORT}\n" not in out and "api_key: y\n" not in out
    assert f"api_key: {SHORT}\\n" not in out and "api_key: y\\n" not in out  # nor inside a JSON string


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "registry"
    (root / "engines").mkdir(parents=True)
    (root / "recipes" / CARD).mkdir(parents=True)
    for profile in (TEMPLATE, FROZEN):
        (root / "engines" / f"{profile['id']}.json").write_text(json.dumps(profile, indent=2) + "\n")
        (root / "recipes" / CARD / f"wren-7b.{profile['id']}.32k.json").write_text(
            json.dumps(_recipe(profile), separators=(",", ":")) + "\n")
    return root


@pytest.fixture
def db(tree: Path, tmp_path: Path) -> Path:
    path = tmp_path / "r.sqlite3"
    code, out = _run("registry", "import", str(tree), "--db", str(path))
    assert code == 0 and " 0 refused" in out, out
    _clean(out)
    return path


def test_show_by_id_and_by_file_prints_no_config_key(tree: Path, db: Path) -> None:
    code, out = _run("registry", "show", "wrenserve-exl3", "--db", str(db))
    assert code == 0, out
    _clean(out)
    # the lines are there, each secret in place of its value; a count and a switch kept
    for line in (f'"  admin_key: {REDACTED}  # the admin\'s"', f'"  api_key: {REDACTED}"',
                 f'"  token: {REDACTED}"', '"  tokens: 512"', '"  disable_auth: false"', '"  password: |"',
                 f'"    {REDACTED}"', '"  model_name: ${name}"'):
        assert line in out, line
    code, out = _run("registry", "show", str(tree / "engines" / "wrenserve-exl3.json"))
    assert code == 0, out
    _clean(out)
    assert f'"  admin_key: {REDACTED}  # the admin\'s"' in out
    code, out = _run("registry", "show", "llama.cpp-wren-frozen", "--db", str(db), "--json")
    assert code == 0, out
    _clean(out)
    text = json.loads(out)["record"]["config"]["text"]
    assert text == f"network:\n  admin_key: '{REDACTED}'\n  api_key: {REDACTED}\n  tokens: 512\n"


def test_the_rendered_launch_and_reproduce_dry_run_show_no_config_key(db: Path) -> None:
    rid = f"{CARD}/wren-7b.wrenserve-exl3.32k"
    code, out = _run("registry", "show", rid, "--db", str(db))
    assert code == 0, out
    _clean(out)
    rendered = out[out.index("launch, rendered from"):]
    assert f"      admin_key: {REDACTED}  # the admin's\n" in rendered
    assert f"      api_key: {REDACTED}\n" in rendered and "      tokens: 512\n" in rendered
    assert "      max_seq_len: 32768\n" in rendered  # the rest still rendered from the profile
    code, out = _run("registry", "show", rid, "--db", str(db), "--json")
    assert code == 0, out
    _clean(out)
    assert f"  token: {REDACTED}\n" in json.loads(out)["launch"]["config"]["text"]
    frozen = f"{CARD}/wren-7b.llama.cpp-wren-frozen.32k"
    code, out = _run("registry", "show", frozen, "--db", str(db))
    assert code == 0, out
    _clean(out)
    assert f"    admin_key: '{REDACTED}'\n" in out
    for record in (frozen, rid):  # llama.cpp's launch is translated; wrenserve's shown as recorded (issue 33)
        for extra in ([], ["--json"]):
            code, out = _run("reproduce", record, "--db", str(db), "--dry-run", *extra)
            assert code == 0, out
            assert (record == frozen) is ("would not run here" not in out and '"runs_here": false' not in out)
            _clean(out)


def test_the_database_holds_the_profiles_bytes_as_they_are(tree: Path, db: Path) -> None:
    """Issue 33 item 1: the bytes are the file's (the wrong answer, before: its config lines redacted, so the sha256
    held was not the upstream file's); what is shown is redacted (the tests above)."""
    with sqlite3.connect(db) as conn:
        held = {bytes(row[0]) for row in conn.execute("SELECT bytes FROM sources")}
    files = {p.read_bytes() for p in tree.rglob("*.json")}
    assert held and held <= files
    assert any(ADMIN.encode() in b for b in held)


def test_a_recipe_file_shown_with_its_profile_beside_it_shows_no_config_key(tree: Path) -> None:
    """`registry show FILE` / `reproduce FILE` of a recipe in a checkout render from the profile beside it."""
    recipes = tree / "recipes" / CARD
    code, out = _run("registry", "show", str(recipes / "wren-7b.wrenserve-exl3.32k.json"))
    assert code == 0, out
    _clean(out)
    assert f"profile from {tree / 'engines' / 'wrenserve-exl3.json'}" in out  # rendered from the file beside it
    assert f"      admin_key: {REDACTED}  # the admin's\n" in out and f"        {REDACTED}\n" in out
    for extra in ([], ["--json"]):
        code, out = _run("reproduce", str(recipes / "wren-7b.llama.cpp-wren-frozen.32k.json"), "--dry-run", *extra)
        assert code == 0, out
        _clean(out)
