"""choose, reproduce and `registry show` use a lab recipe's launch as the lab renders it from its engine profile.

A template profile's recipe launches with the profile's defaults and the recipe's `set` over them: a recipe that sets
ctx 65536 on a profile defaulting to 32768 launches with 65,536 tokens, whatever its file name says (the wrong answer
servepack gave: the <n>k of the file name, and `${ctx}` never filled anywhere it was shown). The profiles and recipes
are written here for this test (a fictitious "wrenserve" engine on a "ferro" card), none copied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli

CARD = "ferro-gpu-24gb"
DIGEST = "0a1b2c3d4e5f" + "7" * 52
TEMPLATE: dict[str, Any] = {
    "id": "wrenserve-exl3",
    "about": "Wrenserve on an EXL3 backend (fictitious)",
    "image": f"ghcr.io/example/wrenserve@sha256:{DIGEST}",
    "backend": "nvidia", "port": 5000, "shm": "8g",
    "entrypoint": "/opt/venv/bin/python3",
    "args": ["main.py", "--config", "/app/config.yml"],
    "weights_at": "/workspace/models/${name}",
    "config_at": "/app/config.yml",
    "defaults": {"ctx": 32768, "seqs": 1, "cache": "Q4", "draft": "none", "vision": False},
    "config": ["model:", "  model_name: ${name}", "  max_seq_len: ${ctx}", "  cache_size: ${cache_tokens}",
               "  cache_mode: ${cache}", "  vision: ${vision}", "draft_model: ${draft_block}"],
}
FROZEN: dict[str, Any] = {
    "id": "llama.cpp-wren-7b-q4-16k", "engine": "llama.cpp", "about": "Wren-7B GGUF Q4_K_M (fictitious)",
    "image": f"ghcr.io/example/llama.cpp@sha256:{DIGEST}", "backend": "nvidia", "port": 8080, "entrypoint": None,
    "args": ["-m", "/models/wren-7b-Q4_K_M.gguf", "--host", "0.0.0.0", "--port", "8080", "--ctx-size", "16384",
             "--parallel", "1"],
    "env": {}, "shm": "8g", "config": None, "ctx": 16384, "seqs": 1, "vision": False, "cards": 1,
    "weights": [{"repo": "acme/Wren-7B-GGUF", "revision": "1" * 40, "at": "/models", "layout": "dir",
                 "files": "wren-7b-Q4_K_M.gguf"}],
}
PROOF = [{"at": "2026-09-05", "on": "owner", "gpu": "Ferro GPU 24GB",
          "gates": "load chat reasoning tools context speed", "tps": 41.0, "prefill": 900, "served": "wren-7b"}]


def _why(out: str) -> str:
    """`reproduce --dry-run` of a record it cannot run here (issue 33 item 6): shown, exit 0; the reason is the line
    "would not run here: …" (it was exit 2, the reason on stderr, nothing shown)."""
    lines = [ln.removeprefix("would not run here: ") for ln in out.splitlines()
             if ln.startswith("would not run here: ")]
    assert len(lines) == 1, out
    return lines[0]


def _recipe(profile: dict[str, Any], sets: object, weights: str = "acme/Wren-7B-exl3@" + "2" * 40) -> dict[str, Any]:
    return {"model": "wren-7b", "weights": weights, "engine": f"{profile['id']}@0a1b2c3d4e5f", "set": sets,
            "card": CARD, "proof": PROOF}


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code in (0, 1, 2), result.exception  # never an unhandled error (exit 70)
    return result.exit_code, result.stdout, result.stderr


def _db(tmp_path: Path, recipes: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> Path:
    """A registry tree (engines/, recipes/<card>/<stem>.json) of these recipes and their profiles, imported."""
    root = tmp_path / "registry"
    (root / "engines").mkdir(parents=True)
    (root / "recipes" / CARD).mkdir(parents=True)
    for stem, (profile, recipe) in recipes.items():
        (root / "engines" / f"{profile['id']}.json").write_text(json.dumps(profile, indent=2) + "\n")
        text = json.dumps(recipe, separators=(",", ":")) + "\n"
        assert len(text.encode()) <= 1024  # the lab's own limit on a recipe file
        (root / "recipes" / CARD / f"{stem}.json").write_text(text)
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(root), "--db", str(db))
    assert code == 0 and " 0 refused" in out, out + err
    return db


def _context_check(db: Path, recipe_id: str, context: int) -> dict[str, Any]:
    code, out, err = _run("registry", "choose", "wren-7b", "--db", str(db), "--context", str(context), "--json")
    assert code == 0, out + err
    cand = next(c for c in json.loads(out)["candidates"] if c["recipe_id"] == recipe_id)
    check: dict[str, Any] = next(c for c in cand["checks"] if c["check"] == "context")
    return check


SET_64K = f"{CARD}/wren-7b.wrenserve-exl3.32k"  # the file name says 32k; its set says 65536


@pytest.fixture
def set_64k(tmp_path: Path) -> Path:
    return _db(tmp_path, {"wren-7b.wrenserve-exl3.32k": (TEMPLATE, _recipe(TEMPLATE, {"ctx": 65536}))})


def test_choose_checks_the_rendered_context_not_the_file_name(set_64k: Path) -> None:
    within = _context_check(set_64k, SET_64K, 49152)
    # the wrong answer: "asked 49,152 tokens; the recipe launches with a 32,768-token context" (from the file name)
    assert within["ok"] is not False and "32,768" not in within["detail"]
    assert within["detail"] == ("asked 49,152 tokens; the record states no context it measured (it launches with "
                                "65,536)")
    beyond = _context_check(set_64k, SET_64K, 100000)
    assert beyond["ok"] is False
    assert beyond["detail"].startswith("asked 100,000 tokens; the recipe launches with a 65,536-token context")


def test_list_shows_and_filters_by_the_rendered_context(set_64k: Path) -> None:
    code, out, err = _run("registry", "list", "--db", str(set_64k))
    assert code == 0, out + err
    assert "engine wrenserve · context 65,536 · concurrency 1 ·" in out  # the wrong answer: context 32,768
    code, out, err = _run("registry", "list", "--db", str(set_64k), "--context", "60000", "--json")
    assert code == 0, out + err
    assert [r["id"] for r in json.loads(out)["recipes"]] == [SET_64K]
    code, out, err = _run("registry", "list", "--db", str(set_64k), "--context", "70000", "--json")
    assert code == 0 and json.loads(out)["recipes"] == []


def test_a_recipe_that_sets_nothing_launches_with_the_profiles_default(tmp_path: Path) -> None:
    db = _db(tmp_path, {"wren-7b.wrenserve-exl3.64k": (TEMPLATE, _recipe(TEMPLATE, {}))})
    check = _context_check(db, f"{CARD}/wren-7b.wrenserve-exl3.64k", 49152)
    assert check["ok"] is False  # the file name's 64k would have said it holds 49,152
    assert check["detail"].startswith("asked 49,152 tokens; the recipe launches with a 32,768-token context")


def test_a_frozen_profiles_context_is_its_own(tmp_path: Path) -> None:
    db = _db(tmp_path, {"wren-7b.llama.cpp-wren-7b-q4-16k.64k": (FROZEN, _recipe(FROZEN, {}, "acme/Wren-7B-GGUF@"
                                                                                          + "1" * 40))})
    check = _context_check(db, f"{CARD}/wren-7b.llama.cpp-wren-7b-q4-16k.64k", 32768)
    assert check["ok"] is False
    assert check["detail"].startswith("asked 32,768 tokens; the recipe launches with a 16,384-token context")
    code, out, err = _run("registry", "show", f"{CARD}/wren-7b.llama.cpp-wren-7b-q4-16k.64k", "--db", str(db))
    assert code == 0, out + err
    assert "launch, rendered from frozen engine profile llama.cpp-wren-7b-q4-16k (lab.py render):" in out
    assert "  program (the image's own entrypoint) in image ghcr.io/example/llama.cpp@sha256:" + DIGEST in out
    assert "  frozen profile: ctx 16,384, seqs 1, vision false" in out


def test_show_prints_the_rendered_launch_and_config(set_64k: Path) -> None:
    code, out, err = _run("registry", "show", SET_64K, "--db", str(set_64k))
    assert code == 0, out + err
    shown = out[out.index("launch, rendered from"):].splitlines()
    assert shown == [
        "launch, rendered from template engine profile wrenserve-exl3 (lab.py render):",
        f"  program /opt/venv/bin/python3 in image ghcr.io/example/wrenserve@sha256:{DIGEST}",
        "  args main.py --config /app/config.yml",
        "  settings ctx 65,536 (set; default 32,768), seqs 1, cache Q4, draft none, vision false",
        "  ctx 65,536 · seqs 1 · vision false",
        f"  weights acme/Wren-7B-exl3@{'2' * 40} at /workspace/models/Wren-7B-exl3-22222222",
        shown[6],
        "    model:",
        "      model_name: Wren-7B-exl3-22222222",
        "      max_seq_len: 65536",
        "      cache_size: 66560",
        "      cache_mode: Q4",
        "      vision: false",
        "    draft_model: {}",
    ]
    assert shown[6].startswith("  config /app/config.yml (sha256 ")
    assert "${" not in out[out.index("launch, rendered from"):]  # every placeholder filled where it is shown
    code, out, err = _run("registry", "show", SET_64K, "--db", str(set_64k), "--json")
    assert code == 0, out + err
    launch = json.loads(out)["launch"]
    assert (launch["ctx"], launch["settings"]["ctx"], launch["set"]) == (65536, 65536, ["ctx"])
    assert "  max_seq_len: 65536\n" in launch["config"]["text"]


def test_the_dry_run_names_the_rendered_settings(set_64k: Path) -> None:
    code, out, _ = _run("reproduce", SET_64K, "--db", str(set_64k), "--dry-run")
    assert code == 0
    assert (f"engine profile wrenserve-exl3 args (image ghcr.io/example/wrenserve@sha256:{DIGEST}; settings ctx "
            "65,536 (set; default 32,768), seqs 1, cache Q4, draft none, vision false): the record's engine "
            "'wrenserve' has no launch translation") in _why(out)


MISSING = {**TEMPLATE, "id": "wrenserve-rope", "config": [*TEMPLATE["config"], "rope_scale: ${rope}"]}


def test_a_placeholder_nothing_fills_is_one_line_in_choose_show_and_reproduce(tmp_path: Path) -> None:
    db = _db(tmp_path, {"wren-7b.wrenserve-rope.32k": (MISSING, _recipe(MISSING, {}))})
    rid = f"{CARD}/wren-7b.wrenserve-rope.32k"
    said = ("cannot render: profile wrenserve-rope's config names ${rope}, which neither its defaults nor the recipe "
            "sets (line 8)")
    check = _context_check(db, rid, 8192)
    assert check == {"check": "context", "ok": False,
                     "detail": f"asked 8,192 tokens; the recipe's launch is not known: {said}"}
    code, out, _ = _run("registry", "show", rid, "--db", str(db))
    assert code == 0 and f"launch: {said}" in out.splitlines()
    code, out, _ = _run("registry", "list", "--db", str(db))
    assert code == 0 and "· context ? ·" in out  # not the 32k of its file name: its launch is not known
    code, out, _ = _run("registry", "show", rid, "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["launch_notice"] == said
    code, out, _ = _run("reproduce", rid, "--db", str(db), "--dry-run")
    assert code == 0 and len(_why(out).splitlines()) == 1
    assert _why(out).endswith(f"{said}; so the lab recipe cannot be reproduced here")


@pytest.mark.parametrize(("profile", "sets", "said"), [
    (TEMPLATE, {"ctx": {"tokens": 65536}},
     "cannot render: the recipe's set.ctx is an object; a setting is a word, a number or true/false"),
    (TEMPLATE, {"rope": 2}, "cannot render: the recipe sets rope, which is not a setting of wrenserve-exl3 (its "
     "settings: cache, ctx, draft, seqs, vision)"),
    ({**TEMPLATE, "config": "model: ${name}"},
     {}, "cannot render: profile wrenserve-exl3's config is a string, not a list of strings"),
    ({**TEMPLATE, "defaults": {**TEMPLATE["defaults"], "cache": "Q" * 50_000}}, {},
     "cannot render: profile wrenserve-exl3's defaults.cache is 50,000 characters long; a setting is a word or a "
     "number (at most 4,096 characters)"),
])
def test_hostile_settings_are_a_notice_in_show_and_choose_and_why_not_in_reproduce(
        tmp_path: Path, profile: dict[str, Any], sets: object, said: str) -> None:
    db = _db(tmp_path, {"wren-7b.wrenserve-exl3.32k": (profile, _recipe(profile, sets))})
    rid = f"{CARD}/wren-7b.wrenserve-exl3.32k"
    assert _context_check(db, rid, 8192)["detail"] == f"asked 8,192 tokens; the recipe's launch is not known: {said}"
    code, out, _ = _run("registry", "show", rid, "--db", str(db))
    assert code == 0 and f"launch: {said}" in out.splitlines()
    code, out, _ = _run("reproduce", rid, "--db", str(db), "--dry-run")
    assert code == 0 and len(_why(out).splitlines()) == 1 and said in _why(out)


def test_a_lab_recipe_shown_from_its_file_says_where_its_launch_comes_from(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # the top of the user's checkout: the walk for the profile stops there
    path = tmp_path / CARD / "wren-7b.wrenserve-exl3.32k.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_recipe(TEMPLATE, {"ctx": 65536}), separators=(",", ":")) + "\n")
    code, out, err = _run("registry", "show", str(path), "--db", str(tmp_path / "none.sqlite3"))
    assert code == 0, out + err
    assert ("launch: the launch is rendered from engine profile 'wrenserve-exl3', which is not beside this file (no "
            f"engines/wrenserve-exl3.json in the 2 folders from {tmp_path / CARD} up to {tmp_path}); keep the "
            "registry's engines/ folder (engines/<profile id>.json) at the top of the checkout that holds the recipe, "
            "or import that folder and show the recipe by its id") in out.splitlines()
    # with the profile beside it, the same file shows the launch rendered from it (tests/integration/registry/
    # test_lab_beside.py has the rest)
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "wrenserve-exl3.json").write_text(json.dumps(TEMPLATE))
    code, out, err = _run("registry", "show", str(path), "--db", str(tmp_path / "none.sqlite3"))
    assert code == 0, out + err
    assert "  ctx 65,536 · seqs 1 · vision false" in out.splitlines()
