"""`registry show FILE` and `reproduce FILE` of a lab recipe find its engine profile beside the file, in the checkout
that holds it (engines/<profile id>.json at the top of the tree, as the registry's lab reads it), render the launch
from it and name the file it came from; none, two, a broken one or a hostile one (a link out of the tree, a FIFO, a
file past the bound) is one clear line, never a crash.

The trees are written here for this test (a fictitious "finchserve" engine on a "ferro" card), none copied."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.registry.format.lab_beside import PROFILE_LEVELS, find_profile_beside

CARD = "ferro-gpu-24gb"
DIGEST = "5a6b7c8d9e0f" + "3" * 52
TEMPLATE: dict[str, Any] = {
    "id": "finchserve-exl3",
    "about": "Finchserve on an EXL3 backend (fictitious)",
    "image": f"ghcr.io/example/finchserve@sha256:{DIGEST}",
    "backend": "nvidia", "port": 5000, "shm": "8g",
    "entrypoint": "/opt/venv/bin/python3",
    "args": ["serve.py", "--config", "/app/config.yml"],
    "weights_at": "/workspace/models/${name}",
    "config_at": "/app/config.yml",
    "defaults": {"ctx": 32768, "seqs": 1, "cache": "Q6", "draft": "none", "vision": False},
    "config": ["model_name: ${name}", "max_seq_len: ${ctx}", "cache_mode: ${cache}"],
}
FROZEN: dict[str, Any] = {
    "id": "llama.cpp-finch-3b-q4-8k", "engine": "llama.cpp", "about": "Finch-3B GGUF Q4_K_M (fictitious)",
    "image": f"ghcr.io/example/llama.cpp@sha256:{DIGEST}", "backend": "nvidia", "port": 8080, "entrypoint": None,
    "args": ["-m", "/models/finch-3b-Q4_K_M.gguf", "--host", "0.0.0.0", "--port", "8080", "--ctx-size", "8192",
             "--parallel", "1", "--api-key", "sk-profile-secret-123"],
    "env": {}, "shm": "8g", "config": None, "ctx": 8192, "seqs": 1, "vision": False, "cards": 1,
    "weights": [{"repo": "acme/Finch-3B-GGUF", "revision": "4" * 40, "at": "/models", "layout": "dir",
                 "files": "finch-3b-Q4_K_M.gguf"}],
}
PROOF = [{"at": "2026-10-01", "on": "owner", "gpu": "Ferro GPU 24GB",
          "gates": "load chat reasoning tools context speed", "tps": 33.0, "prefill": 700, "served": "finch-3b"}]
STEM = "finch-3b.finchserve-exl3.32k"  # the file name says 32k; its set says 65536


def _why(out: str) -> str:
    """`reproduce --dry-run` of a record it cannot run here (issue 33 item 6): shown, exit 0; the reason is the line
    "would not run here: …" (it was exit 2, the reason on stderr, nothing shown)."""
    lines = [ln.removeprefix("would not run here: ") for ln in out.splitlines()
             if ln.startswith("would not run here: ")]
    assert len(lines) == 1, out
    return lines[0]


def _recipe(profile: dict[str, Any], sets: dict[str, Any], weights: str = "acme/Finch-3B-exl3@" + "5" * 40
            ) -> dict[str, Any]:
    return {"model": "finch-3b", "weights": weights, "engine": f"{profile['id']}@{DIGEST[:12]}", "set": sets,
            "card": CARD, "proof": PROOF}


def _write(path: Path, doc: dict[str, Any], compact: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n" if compact else json.dumps(doc, indent=2) + "\n")
    return path


def _checkout(root: Path, profile: dict[str, Any] = TEMPLATE, sets: dict[str, Any] | None = None, *,
              under: str = CARD, stem: str = STEM, with_profile: bool = True) -> Path:
    """A registry checkout (.git, engines/, recipes/<under>/): the recipe file's path."""
    (root / ".git").mkdir(parents=True)
    if with_profile:
        _write(root / "engines" / f"{profile['id']}.json", profile)
    else:
        (root / "engines").mkdir()
    return _write(root / "recipes" / under / f"{stem}.json", _recipe(profile, {"ctx": 65536} if sets is None else sets),
                  compact=True)


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code in (0, 1, 2), result.exception  # never an unhandled error (exit 70)
    return result.exit_code, result.stdout, result.stderr


def _show(path: Path, tmp_path: Path, *more: str) -> tuple[int, str, str]:
    return _run("registry", "show", str(path), "--db", str(tmp_path / "none.sqlite3"), *more)


def _dry_run(path: Path, tmp_path: Path) -> tuple[int, str, str]:
    # no database at all: the default one is looked for in an empty cache (a --db that is not there is refused)
    return _run("reproduce", str(path), "--dry-run", env={"SERVEPACK_CACHE_DIR": str(tmp_path / "cache")})


def test_show_of_a_recipe_in_a_checkout_renders_it_from_the_profile_beside_it(tmp_path: Path) -> None:
    recipe = _checkout(tmp_path / "registry")
    profile = tmp_path / "registry" / "engines" / "finchserve-exl3.json"
    code, out, err = _show(recipe, tmp_path)
    assert code == 0, out + err
    shown = out[out.index("launch"):].splitlines()
    # the wrong answer: "launch: … which the registry database does not hold beside this record; import …"
    assert shown[:4] == [
        "launch, rendered from template engine profile finchserve-exl3 (lab.py render):",
        f"  profile from {profile} (sha256 {hashlib.sha256(profile.read_bytes()).hexdigest()[:12]}…)",
        f"  program /opt/venv/bin/python3 in image ghcr.io/example/finchserve@sha256:{DIGEST}",
        "  args serve.py --config /app/config.yml",
    ]
    assert "  ctx 65,536 · seqs 1 · vision false" in shown and "    max_seq_len: 65536" in shown
    code, out, err = _show(recipe, tmp_path, "--json")
    assert code == 0, out + err
    s = json.loads(out)
    assert s["launch"]["ctx"] == 65536 and s["launch"]["settings"]["cache"] == "Q6"
    assert s["launch_profile"] == {"path": str(profile), "sha256": hashlib.sha256(profile.read_bytes()).hexdigest()}
    assert s["launch_profile_skipped"] == []


def test_a_vendor_folder_between_recipes_and_the_card_is_within_the_walk(tmp_path: Path) -> None:
    recipe = _checkout(tmp_path / "registry", under=f"ferro/{CARD}")  # recipes/<vendor>/<card>/: 4 folders up
    code, out, err = _show(recipe, tmp_path, "--json")
    assert code == 0, out + err
    assert json.loads(out)["launch"]["ctx"] == 65536


def test_the_dry_run_launches_the_rendered_argv_and_names_the_profile_file(tmp_path: Path) -> None:
    recipe = _checkout(tmp_path / "registry", FROZEN, {}, stem="finch-3b.llama.cpp-finch-3b-q4-8k.8k")
    profile = tmp_path / "registry" / "engines" / f"{FROZEN['id']}.json"
    code, out, err = _dry_run(recipe, tmp_path)
    assert code == 0, out + err
    assert (f"launch here (engine profile llama.cpp-finch-3b-q4-8k (from {profile}) args (image "
            f"ghcr.io/example/llama.cpp@sha256:{DIGEST}; frozen profile: ctx 8,192, seqs 1, vision false)") in out
    argv = out[out.index("launch here ("):].splitlines()[1]
    assert "--ctx-size 8192" in argv and "--parallel 1" in argv
    assert "sk-profile-secret-123" not in out + err  # the profile's key is redacted as an imported one's is
    assert "dry run: nothing launched" in out


def test_the_template_dry_run_names_the_profile_file_and_its_rendered_settings(tmp_path: Path) -> None:
    recipe = _checkout(tmp_path / "registry")
    profile = tmp_path / "registry" / "engines" / "finchserve-exl3.json"
    code, out, _ = _dry_run(recipe, tmp_path)
    assert code == 0 and len(_why(out).splitlines()) == 1
    assert (f"engine profile finchserve-exl3 (from {profile}) args (image ghcr.io/example/finchserve@sha256:{DIGEST}; "
            "settings ctx 65,536 (set; default 32,768), seqs 1, cache Q6, draft none, vision false): the record's "
            "engine 'finchserve' has no launch translation") in _why(out)


def _notice(out: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.startswith("launch: ")]
    assert len(lines) == 1, out
    return lines[0]


FIX = ("keep the registry's engines/ folder (engines/<profile id>.json) at the top of the checkout that holds the "
       "recipe, or import that folder")


def test_no_profile_beside_the_file_is_one_line_naming_where_it_looked(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    recipe = _checkout(root, with_profile=False)
    looked = ("is not beside this file (no engines/finchserve-exl3.json in the 3 folders from "
              f"{root / 'recipes' / CARD} up to {root})")
    code, out, err = _show(recipe, tmp_path)
    assert code == 0, out + err
    assert _notice(out) == (f"launch: the launch is rendered from engine profile 'finchserve-exl3', which {looked}; "
                            f"{FIX} and show the recipe by its id")
    code, out, _ = _dry_run(recipe, tmp_path)
    assert code == 0 and len(_why(out).splitlines()) == 1
    assert _why(out).endswith(f"which {looked}; {FIX} and reproduce the recipe by its id")


def test_two_profiles_with_the_id_are_ambiguous(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    recipe = _checkout(root)
    _write(root / "recipes" / "engines" / "finchserve-exl3.json", {**TEMPLATE, "about": "another"})
    said = (f"is beside this file more than once ({root / 'recipes' / 'engines' / 'finchserve-exl3.json'} and "
            f"{root / 'engines' / 'finchserve-exl3.json'}): which one the recipe was proven with is not known")
    code, out, err = _show(recipe, tmp_path)
    assert code == 0 and said in _notice(out), out + err
    code, out, _ = _dry_run(recipe, tmp_path)
    assert code == 0 and len(_why(out).splitlines()) == 1 and said in _why(out)


@pytest.mark.parametrize(("text", "why"), [
    ("{not json", "not a JSON registry record"),
    (json.dumps({k: v for k, v in TEMPLATE.items() if k != "args"}),
     "engine profile breaks the registry's rule: args: an engine profile names it (lab/lab.py render)"),
    (json.dumps({**TEMPLATE, "id": "finchserve-other"}), "its id is 'finchserve-other', not 'finchserve-exl3'"),
    (json.dumps([1, 2]), "a registry record is a JSON object"),
])
def test_a_profile_that_does_not_parse_is_one_line(tmp_path: Path, text: str, why: str) -> None:
    root = tmp_path / "registry"
    recipe = _checkout(root, with_profile=False)
    (root / "engines" / "finchserve-exl3.json").write_text(text)
    code, out, err = _show(recipe, tmp_path)
    assert code == 0, out + err
    notice = _notice(out)
    assert (f"which is beside this file in {root / 'engines' / 'finchserve-exl3.json'}, which is no engine profile "
            "of that id the registry accepts (") in notice and why in notice
    code, out, _ = _dry_run(recipe, tmp_path)
    assert code == 0 and len(_why(out).splitlines()) == 1 and why in _why(out)


def test_a_symlinked_engines_folder_pointing_outside_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "engines"
    _write(outside / "finchserve-exl3.json", TEMPLATE)  # a valid profile, but outside the user's tree
    root = tmp_path / "registry"
    (root / ".git").mkdir(parents=True)
    (root / "engines").symlink_to(outside, target_is_directory=True)
    recipe = _write(root / "recipes" / CARD / f"{STEM}.json", _recipe(TEMPLATE, {"ctx": 65536}), compact=True)
    code, out, err = _show(recipe, tmp_path)
    assert code == 0, out + err
    assert "is not beside this file" in _notice(out)
    assert (f"  {root / 'engines'}: a symbolic link (to {outside}), not followed: a profile is read from the checkout "
            "itself") in out.splitlines()
    assert "ctx 65,536" not in out  # never rendered from the file outside
    code, out, _ = _dry_run(recipe, tmp_path)
    assert code == 0 and len(_why(out).splitlines()) == 1 and "a symbolic link" in _why(out)


def test_a_symlinked_profile_file_is_not_followed(tmp_path: Path) -> None:
    elsewhere = _write(tmp_path / "elsewhere.json", TEMPLATE)
    root = tmp_path / "registry"
    recipe = _checkout(root, with_profile=False)
    (root / "engines" / "finchserve-exl3.json").symlink_to(elsewhere)
    found = find_profile_beside(recipe, "finchserve-exl3")
    assert found.profile is None and found.skipped == (
        f"{root / 'engines' / 'finchserve-exl3.json'}: a symbolic link (to {elsewhere}), not followed: a profile is "
        "read from the checkout itself",)


def test_a_fifo_as_the_profile_is_skipped_and_the_one_above_is_used(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    recipe = _checkout(root)
    fifo = root / "recipes" / "engines" / "finchserve-exl3.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(show=_show(recipe, tmp_path)), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "reading the FIFO blocked"
    code, out, err = result["show"]
    assert code == 0, out + err
    assert "  profile from " + str(root / "engines" / "finchserve-exl3.json") in out
    assert (f"  {fifo}: not a regular file (a FIFO (named pipe)); not read as the recipe's engine profile"
            in out.splitlines())
    assert "  ctx 65,536 · seqs 1 · vision false" in out


def test_a_huge_profile_file_is_skipped_unread(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    recipe = _checkout(root, with_profile=False)
    huge = root / "engines" / "finchserve-exl3.json"
    with huge.open("wb") as fh:
        fh.truncate(64 << 20)  # sparse: 64 MiB that take no disk
    code, out, err = _show(recipe, tmp_path)
    assert code == 0, out + err
    assert f"  {huge}: larger than 4 MiB; not read as the recipe's engine profile" in out.splitlines()
    assert "is not beside this file" in _notice(out)


def test_the_walk_stops_at_the_checkout_top_and_after_a_few_folders(tmp_path: Path) -> None:
    # a profile above the checkout's top (a folder holding .git) is another tree's: not used
    _write(tmp_path / "engines" / "finchserve-exl3.json", TEMPLATE)
    recipe = _checkout(tmp_path / "registry", with_profile=False)
    assert find_profile_beside(recipe, "finchserve-exl3").profile is None
    # no top at all: the walk ends after PROFILE_LEVELS folders (the recipe's and three above)
    deep = _write(tmp_path / "a" / "b" / "c" / "d" / "e" / f"{STEM}.json", _recipe(TEMPLATE, {}), compact=True)
    _write(tmp_path / "a" / "engines" / "finchserve-exl3.json", TEMPLATE)  # 5 folders above the recipe's file
    found = find_profile_beside(deep, "finchserve-exl3")
    assert PROFILE_LEVELS == 4 and found.profile is None and f"up to {tmp_path / 'a' / 'b'})" in str(found.problem)
    _write(tmp_path / "a" / "b" / "engines" / "finchserve-exl3.json", TEMPLATE)  # 4 folders: found
    found = find_profile_beside(deep, "finchserve-exl3")
    assert found.path == tmp_path / "a" / "b" / "engines" / "finchserve-exl3.json" and found.profile == TEMPLATE


@pytest.mark.parametrize(("ref", "why"), [
    ("../../outside", "names no file of an engines/ folder: the id '../../outside' holds a path separator"),
    ("..\\outside", "names no file of an engines/ folder: the id '..\\\\outside' holds a path separator"),
    ("", "is not named (the recipe's engine field names no profile id)"),
    (".hidden", "names no file of an engines/ folder: the id '.hidden' starts with a dot (a hidden file)"),
    ("bell\x07", "names no file of an engines/ folder: the id 'bell\\x07' holds a NUL or control character"),
])
def test_a_profile_id_that_is_no_file_name_is_not_looked_up(tmp_path: Path, ref: str, why: str) -> None:
    _write(tmp_path / "engines" / "outside.json", TEMPLATE)
    found = find_profile_beside(tmp_path / "x" / "r.json", ref)
    assert (found.profile, found.problem, found.skipped) == (None, why, ())
