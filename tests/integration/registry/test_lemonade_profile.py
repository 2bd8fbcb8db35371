"""A lemonade profile's llama.cpp args and context are the launch `reproduce` runs (issue 33, open item 2).

Lemonade starts llama.cpp's llama-server itself, with the args and context its options file (`recipe_options.json`:
`ctx_size`, `llamacpp_args`), its config (`llamacpp.args`) or its own flags (`--llamacpp-args`, `--ctx-size`) state.
The wrong answer servepack gave: `reproduce --dry-run` showed the profile's config lines but the launch it would run
had none of those flags and not its context (or was refused as an engine with no translation). Now they are
translated through the same flag table and policy as any launch, the context comes from the profile, and where the
places disagree or cannot be read the record is refused, naming why. The profiles are written here for this test
(a fictitious lemonade build on a "ferro" card), none copied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.registry.format.lab_launch import CannotRender, render_lab_launch
from servepack.registry.format.lemonade import is_lemonade, lemonade_llamacpp

CARD = "ferro-gpu-24gb"
DIGEST = "0a1b2c3d4e5f" + "7" * 52
ARGS = "-ngl 99 --flash-attn on -ctk q8_0 -ctv q8_0 --parallel 1"
LEMONADE: dict[str, Any] = {
    "id": "lemonade-wren-vulkan",
    "engine": "lemonade",
    "about": "Lemonade serving a GGUF on its Vulkan llama.cpp backend (fictitious)",
    "image": f"ghcr.io/example/lemonade-server@sha256:{DIGEST}",
    "backend": "vulkan", "port": 8000, "shm": "8g",
    "entrypoint": "lemonade-server",
    "args": ["serve", "--host", "0.0.0.0", "--port", "8000"],
    "weights_at": "/models/${name}",
    "config_at": "/root/.cache/lemonade/recipe_options.json",
    "defaults": {"ctx": 32768, "seqs": 1, "vision": False},
    "config": ['{"user.Wren-7B": {"ctx_size": ${ctx}, "llamacpp_backend": "vulkan",',
               f' "llamacpp_args": "{ARGS}"}}}}'],
}
PROOF = [{"at": "2026-09-05", "on": "owner", "gpu": "Ferro GPU 24GB",
          "gates": "load chat reasoning tools context speed", "tps": 41.0, "prefill": 900, "served": "wren-7b"}]
WEIGHTS = "acme/Wren-7B-GGUF@" + "1" * 40


def _recipe(profile: dict[str, Any], sets: dict[str, Any]) -> dict[str, Any]:
    return {"model": "wren-7b", "weights": WEIGHTS, "engine": f"{profile['id']}@0a1b2c3d4e5f", "set": sets,
            "card": CARD, "proof": PROOF}


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code in (0, 1, 2), result.exception
    return result.exit_code, result.stdout, result.stderr


def _db(tmp_path: Path, profile: dict[str, Any], sets: dict[str, Any]) -> tuple[Path, str]:
    root = tmp_path / "registry"
    (root / "engines").mkdir(parents=True)
    (root / "recipes" / CARD).mkdir(parents=True)
    (root / "engines" / f"{profile['id']}.json").write_text(json.dumps(profile, indent=2) + "\n")
    stem = f"wren-7b.{profile['id']}.32k"
    (root / "recipes" / CARD / f"{stem}.json").write_text(json.dumps(_recipe(profile, sets), separators=(",", ":"))
                                                          + "\n")
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(root), "--db", str(db))
    assert code == 0 and " 0 refused" in out, out + err
    return db, f"{CARD}/{stem}"


def test_the_dry_run_launches_llama_server_with_the_profiles_args_and_context(tmp_path: Path) -> None:
    db, rid = _db(tmp_path, LEMONADE, {"ctx": 65536})
    code, out, err = _run("reproduce", rid, "--db", str(db), "--dry-run", "--json")
    assert code == 0, out + err
    got = json.loads(out)
    launch = got["launch"]
    # the wrong answer: no launch translation for 'lemonade', or flags {} with neither -ngl nor the context
    assert launch["flags"] == {"n-gpu-layers": 99, "flash-attn": "on", "cache-type-k": "q8_0",
                               "cache-type-v": "q8_0", "parallel": 1, "ctx-size": 65536}
    assert launch["recorded"] == ["llama-server", *ARGS.split(), "--ctx-size", "65536"]
    assert launch["recorded_where"].startswith(
        "engine profile lemonade-wren-vulkan: lemonade's llama-server launch, args from config "
        "/root/.cache/lemonade/recipe_options.json ('user.Wren-7B') llamacpp_args, context 65,536 from config "
        "/root/.cache/lemonade/recipe_options.json ('user.Wren-7B') ctx_size; lemonade starts llama-server itself")
    assert "llama.cpp backend vulkan" in launch["recorded_where"]
    # the launch as recorded is still shown beside it: the profile's config lines
    parts = {p["part"]: p["value"] for p in launch["as_recorded"]}
    assert parts["program"] == "lemonade-server"


def _lemon(profile: dict[str, Any], sets: dict[str, Any] | None = None) -> Any:
    return lemonade_llamacpp(profile["id"], render_lab_launch(_recipe(profile, sets or {}), profile))


def test_every_place_lemonade_keeps_its_args_is_read() -> None:
    assert is_lemonade(LEMONADE, render_lab_launch(_recipe(LEMONADE, {}), LEMONADE))
    assert _lemon(LEMONADE).argv == ("llama-server", *ARGS.split(), "--ctx-size", "32768")
    # its own flags, no config: the context of the profile unless --ctx-size says it (the same)
    flags = {**LEMONADE, "config": None, "args": ["serve", "--ctx-size", "32768", "--llamacpp-args", ARGS]}
    assert _lemon(flags).argv == ("llama-server", *ARGS.split(), "--ctx-size", "32768")
    # its config file: a backend's own args before the general ones
    cfg = {**LEMONADE, "config": ['{"ctx_size": ${ctx}, "llamacpp": {"backend": "rocm", "args": "-ngl 10",',
                                  ' "rocm_args": "-ngl 99 -fa on"}}']}
    got = _lemon(cfg)
    assert got.argv == ("llama-server", "-ngl", "99", "-fa", "on", "--ctx-size", "32768")
    assert "llama.cpp backend rocm" in " ".join(got.notes)
    # a profile that is not lemonade's is not read so
    llama = {**LEMONADE, "id": "llama.cpp-wren", "engine": "llama.cpp", "backend": "nvidia",
             "image": f"ghcr.io/example/llama.cpp@sha256:{DIGEST}", "entrypoint": None}
    assert not is_lemonade(llama, render_lab_launch(_recipe(llama, {}), llama))


@pytest.mark.parametrize(("profile", "said"), [
    ({**LEMONADE, "args": ["serve", "--llamacpp-args", "-ngl 20"]},
     "lemonade profile lemonade-wren-vulkan states two llama.cpp args: lemonade-server --llamacpp-args '-ngl 20'; "
     "config /root/.cache/lemonade/recipe_options.json ('user.Wren-7B') llamacpp_args"),
    ({**LEMONADE, "args": ["serve", "--ctx-size", "8192"]},
     "lemonade profile lemonade-wren-vulkan states two contexts: lemonade-server --ctx-size 8,192; config "
     "/root/.cache/lemonade/recipe_options.json ('user.Wren-7B') ctx_size 32,768"),
    ({**LEMONADE, "config": ["ctx_size: ${ctx}", f"llamacpp_args: {ARGS}"]},
     "lemonade profile lemonade-wren-vulkan's config /root/.cache/lemonade/recipe_options.json is not JSON"),
    ({**LEMONADE, "config": ['{"a": {"llamacpp_args": "-ngl 1"}, "b": {"llamacpp_args": "-ngl 2"}}']},
     "states options for 'a', 'b', which differ; which model the recipe served is not known"),
    ({**LEMONADE, "config": ['{"llamacpp_args": "-ngl 99 \\"unclosed"}']}, "do not split into words"),
])
def test_places_that_disagree_are_refused_naming_why(tmp_path: Path, profile: dict[str, Any], said: str) -> None:
    with pytest.raises(CannotRender, match="cannot render: ") as exc:
        _lemon(profile)
    assert said in str(exc.value)
    db, rid = _db(tmp_path, profile, {})
    code, out, err = _run("reproduce", rid, "--db", str(db), "--dry-run")
    assert code == 0, out + err
    (why,) = [ln for ln in out.splitlines() if ln.startswith("would not run here: ")]
    assert said in why and why.endswith("so the lab recipe cannot be reproduced here")


def test_the_args_pass_the_same_flag_policy_as_any_launch(tmp_path: Path) -> None:
    """A model source and a secret in lemonade's llama.cpp args: the source dropped (the local file replaces it),
    the key's value never shown."""
    args = "-ngl 99 --hf-repo acme/other-GGUF --api-key sk-lemon-0123456789abcdef"
    profile = {**LEMONADE, "config": ['{"ctx_size": ${ctx}, "llamacpp_args": "' + args + '"}']}
    db, rid = _db(tmp_path, profile, {})
    code, out, err = _run("reproduce", rid, "--db", str(db), "--dry-run", "--json")
    assert code == 0, out + err
    assert "sk-lemon-0123456789abcdef" not in out
    launch = json.loads(out)["launch"]
    assert "hf-repo" not in launch["flags"] and launch["flags"]["n-gpu-layers"] == 99
    dropped = [r for r in launch["rewrites"] if r["action"] == "dropped"]
    assert any(r["flag"] == "--hf-repo" and r["recorded"] == "acme/other-GGUF" for r in dropped)


def _choose(db: Path, rid: str) -> dict[str, Any]:
    code, out, err = _run("registry", "choose", "wren-7b", "--db", str(db), "--context", "8192", "--json")
    assert code == 0, out + err
    cand: dict[str, Any] = next(c for c in json.loads(out)["candidates"] if c["recipe_id"] == rid)
    return {c["check"]: c for c in cand["checks"]}


def test_choose_reads_the_lemonade_launch_as_reproduce_runs_it(tmp_path: Path) -> None:
    """choose judges the engine reproduce would run (llama.cpp's llama-server; the wrong answer: 'lemonade', an engine
    servepack does not drive) and refuses the context of a profile whose places disagree, with the same reason."""
    db, rid = _db(tmp_path / "a", LEMONADE, {"ctx": 65536})
    checks = _choose(db, rid)
    assert "lemonade" not in checks["engine"]["detail"]
    assert checks["context"]["ok"] is not False and "65,536" in checks["context"]["detail"]
    bad = {**LEMONADE, "args": ["serve", "--ctx-size", "8192"]}
    db, rid = _db(tmp_path / "b", bad, {})
    checks = _choose(db, rid)
    assert checks["context"]["ok"] is False
    assert checks["context"]["detail"].startswith(
        "asked 8,192 tokens; the recipe's launch is not known: cannot render: lemonade profile lemonade-wren-vulkan "
        "states two contexts")
