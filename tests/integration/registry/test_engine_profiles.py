"""The lab's engine profiles (engines/<id>.json) import whether or not they name their engine.

The registry's lab renders a recipe's launch from the profile its `engine` field names; its TabbyAPI profile carries
id, image, args and entrypoint but no `engine` field, and servepack used to skip such a file as "not a record" — so
every lab recipe on that profile could not be reproduced ("import the registry's engines/ folder too") although the
folder had been imported. The records here are written for this test (a fictitious "wrenserve"), none copied."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from servepack.cli.main import cli

LAB_ID = "ferro-gpu-24gb/wren-7b.wrenserve-exl3.32k"
PROFILE = {
    "id": "wrenserve-exl3",
    "about": "Wrenserve on an EXL3 backend, OpenAI chat API",
    "image": "ghcr.io/example/wrenserve@sha256:" + "000000000002" + "0" * 52,  # the digest the recipes name
    "backend": "nvidia",
    "port": 5000,
    "entrypoint": "/opt/venv/bin/python3",
    "args": ["main.py", "--config", "/app/config.yml"],
    "defaults": {"ctx": 32768, "seqs": 1},
}
LAB_RECIPE = {
    "model": "wren-7b", "weights": "acme/Wren-7B-exl3@" + "2" * 40, "engine": "wrenserve-exl3@000000000002",
    "set": {"ctx": 32768}, "card": "ferro-gpu-24gb",
    "proof": [{"at": "2026-09-03", "on": "owner", "gpu": "Ferro GPU 24GB",
               "gates": "load chat reasoning tools context speed", "tps": 40.5, "prefill": 900, "served": "wren-7b"}],
}


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


def _tree(root: Path, profile: dict[str, object]) -> Path:
    (root / "engines").mkdir(parents=True)
    (root / "engines" / f"{profile['id']}.json").write_text(json.dumps(profile, indent=2) + "\n")
    card = root / "recipes" / "ferro-gpu-24gb"
    card.mkdir(parents=True)
    (card / "wren-7b.wrenserve-exl3.32k.json").write_text(json.dumps(LAB_RECIPE, separators=(",", ":")) + "\n")
    return root


def test_a_profile_that_names_no_engine_imports_and_its_lab_recipe_finds_it(tmp_path: Path) -> None:
    assert "engine" not in PROFILE
    tree = _tree(tmp_path / "lab", PROFILE)
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(tree), "--db", str(db))
    assert code == 0, out + err
    # the wrong answer servepack gave: "1 imported, …, 1 skipped" (the profile read as not a record)
    assert out.splitlines()[-1].startswith(
        "2 imported, 0 new versions, 0 already present, 0 skipped, 0 refused; by kind: 1 lab recipes, "
        "1 engine profiles;")
    code, out, err = _run("reproduce", LAB_ID, "--db", str(db), "--dry-run")
    # found: the launch is rendered from the profile (not "which the registry database does not hold"), and the
    # engine is named from the profile id, not '?'
    # issue 33 item 6: shown, not refused (it was exit 2 with nothing on stdout): its launch as recorded, and why
    # it would not run here
    assert code == 0, err
    assert "which the registry database does not hold" not in out
    assert f"  image: {PROFILE['image']}\n" in out
    assert (f"would not run here: registry id {LAB_ID} version 1 of 1: engine profile wrenserve-exl3 args (image "
            f"{PROFILE['image']}; settings ctx 32,768 (set; default 32,768), seqs 1): the record's engine 'wrenserve' "
            "has no launch translation; servepack reproduces records of ['llama.cpp']") in out
    assert "'?'" not in out
    code, out, err = _run("registry", "choose", "wren-7b", "--db", str(db), "--json")
    assert code == 0, out + err
    (cand,) = json.loads(out)["candidates"]
    assert cand["recipe_id"] == LAB_ID and cand["engine"] == "wrenserve"


def test_a_profile_that_names_its_engine_keeps_that_name(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "lab", {**PROFILE, "engine": "exllamav3"})
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(tree), "--db", str(db))[0] == 0
    code, out, _ = _run("reproduce", LAB_ID, "--db", str(db), "--dry-run")
    assert code == 0 and "the record's engine 'exllamav3' has no launch translation" in _why(out)


def test_an_engines_file_lacking_a_profile_field_is_refused_not_skipped(tmp_path: Path) -> None:
    no_args = {k: v for k, v in PROFILE.items() if k != "args"}
    tree = _tree(tmp_path / "lab", no_args)
    bad = tree / "engines" / "wrenserve-exl3.json"
    code, out, err = _run("registry", "import", str(tree), "--db", str(tmp_path / "r.sqlite3"))
    assert code == 1
    assert [x for x in err.splitlines() if x.startswith("servepack: refused ")] == [
        f"servepack: refused {bad}: engine profile breaks the registry's rule: args: an engine profile names it "
        "(lab/lab.py render)"]
    assert out.splitlines()[-1].startswith("1 imported, 0 new versions, 0 already present, 0 skipped, 1 refused")


def _lab_only(root: Path, engine_ref: str, stem: str, profile: dict[str, object] | None = None) -> Path:
    card = root / "recipes" / "ferro-gpu-24gb"
    card.mkdir(parents=True)
    doc = {**LAB_RECIPE, "engine": engine_ref, "set": {},
           "proof": [{"at": "2026-09-04", "on": "legacy", "gates": "load chat", "tps": 33.0, "legacy": True}]}
    (card / f"{stem}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    if profile is not None:
        (root / "engines").mkdir()
        (root / "engines" / f"{profile['id']}.json").write_text(json.dumps(profile, indent=2) + "\n")
    return root


def test_a_legacy_lab_recipe_is_launched_as_its_registry_recipe_not_by_an_engine_named_registry(
        tmp_path: Path) -> None:
    """lab.py render: `registry@<id>` is a recipe validated before the lab, launched as registry recipe <id>."""
    tree = _lab_only(tmp_path / "lab", "registry@wren-7b-vllm-ferro-tp1", "wren-7b.registry.32k")
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(tree), "--db", str(db))
    assert code == 0, out + err
    lab_id = "ferro-gpu-24gb/wren-7b.registry.32k"
    code, out, err = _run("registry", "choose", "wren-7b", "--db", str(db), "--json")
    assert code == 0, out + err
    (cand,) = json.loads(out)["candidates"]
    assert cand["recipe_id"] == lab_id and cand["engine"] is None  # the wrong answer was "registry"
    engine = next(c for c in cand["checks"] if c["check"] == "engine")
    assert engine == {"check": "engine", "ok": False, "detail": "the lab recipe names no engine profile: its launch "
                      "is that of registry recipe 'wren-7b-vllm-ferro-tp1' (lab.py render: legacy), which names the "
                      "engine"}
    code, out, err = _run("registry", "list", "--db", str(db))
    assert "engine ? ·" in out and "engine registry" not in out
    code, out, _ = _run("reproduce", lab_id, "--db", str(db), "--dry-run")
    assert code == 0 and "import the registry's engines/ folder too" not in _why(out)
    assert ("cannot reproduce here because the lab recipe's launch is that of registry recipe "
            "'wren-7b-vllm-ferro-tp1' as the registry's plugin export (plugin/v2/recipes.json) carries it (lab.py "
            "render: legacy), not an engine profile; reproduce that recipe itself if the registry database holds "
            "it") in _why(out)


def _model_check(tmp_path: Path, profile: dict[str, object]) -> str:
    tree = _lab_only(tmp_path / "lab", f"{profile['id']}@000000000002", f"wren-7b.{profile['id']}.32k", profile)
    db = tmp_path / "r.sqlite3"
    assert _run("registry", "import", str(tree), "--db", str(db))[0] == 0
    code, out, err = _run("registry", "choose", "wren-7b", "--db", str(db), "--json")
    assert code == 0, out + err
    (cand,) = json.loads(out)["candidates"]
    return str(next(c for c in cand["checks"] if c["check"] == "model")["detail"])


def test_python_dash_m_in_a_profile_is_a_module_not_the_weights_file(tmp_path: Path) -> None:
    sglang = {**PROFILE, "id": "sglang-wren-7b-fp8", "engine": "sglang", "entrypoint": "/opt/venv/bin/python",
              "args": ["-m", "sglang.launch_server", "--model-path", "acme/Wren-7B-FP8", "--port", "30000"]}
    detail = _model_check(tmp_path, sglang)
    assert "sglang.launch_server" not in detail  # the wrong answer: "the record names sglang.launch_server"
    assert detail.startswith("no local file: the record names no file name and pins no sha256")


def test_llama_cpp_dash_m_still_names_the_weights_file(tmp_path: Path) -> None:
    llama = {**PROFILE, "id": "llama.cpp-wren-7b-q4", "engine": "llama.cpp", "entrypoint": None,
             "args": ["-m", "/models/wren-7b-Q4_K_M.gguf", "--ctx-size", "32768"]}
    assert "the record names wren-7b-Q4_K_M.gguf" in _model_check(tmp_path, llama)


def _native_tree(root: Path, profile: dict[str, object]) -> Path:
    """The lab's newer layout: registry/engines/<id>.json, registry/recipes/<vendor>/<card>/<file>."""
    (root / "engines").mkdir(parents=True)
    (root / "engines" / f"{profile['id']}.json").write_text(json.dumps(profile, indent=2) + "\n")
    card = root / "recipes" / "ferro" / "ferro-gpu-24gb"
    card.mkdir(parents=True)
    recipe = {**LAB_RECIPE, "engine": f"{profile['id']}@000000000002"}
    (card / "wren-7b.wrenserve.32k.json").write_text(json.dumps(recipe, separators=(",", ":")) + "\n")
    return root


def test_a_native_profile_without_an_image_imports_and_its_args_are_the_launch(tmp_path: Path) -> None:
    """A `native` profile (a program the host runs from a pinned runtime, no container: the registry's mtplx one on
    Apple silicon) names args and no image; lab.py renders it. The wrong answer: "refused …: image: an engine
    profile names it", which also left its lab recipes without a launch."""
    native = {"id": "llama.cpp-wren-7b-native-8k", "kind": "native", "engine": "llama.cpp", "platform": "linux-x86_64",
              "port": 8080, "ctx": 8192,
              "args": ["llama-server", "-m", "${model_dir}/wren-7b-Q4_K_M.gguf", "-c", "8192", "-ngl", "99", "--host",
                       "127.0.0.1", "--port", "8080"]}
    tree = _native_tree(tmp_path / "registry", native)
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(tree), "--db", str(db))
    assert code == 0, out + err
    assert out.splitlines()[-1].startswith("2 imported, 0 new versions, 0 already present, 0 skipped, 0 refused")
    code, out, err = _run("reproduce", "ferro-gpu-24gb/wren-7b.wrenserve.32k", "--db", str(db), "--dry-run", "--json")
    assert code == 0, out + err
    launch = json.loads(out)["launch"]
    # the lab renders a frozen profile whatever the recipe's set says: the context is the profile's 8,192
    assert launch["recorded_where"] == ("engine profile llama.cpp-wren-7b-native-8k args (native: a program on the "
                                        "host, no image; frozen profile: ctx 8,192, seqs 1, vision false; the "
                                        "recipe's set (ctx) is not applied: a frozen profile takes no settings)")
    assert launch["flags"] == {"ctx-size": 8192, "n-gpu-layers": 99}


def test_a_host_profile_names_its_command_and_one_without_it_is_refused(tmp_path: Path) -> None:
    host = {"id": "wrenserve-host-8k", "kind": "host", "engine": "wrenserve", "port": 9000, "ctx": 8192,
            "command": "wrenserve --port 9000 --ctx 8192", "install": "pipx install wrenserve==1.0"}
    db = tmp_path / "r.sqlite3"
    code, out, err = _run("registry", "import", str(_native_tree(tmp_path / "ok", host)), "--db", str(db))
    assert code == 0, out + err
    code, out, _ = _run("reproduce", "ferro-gpu-24gb/wren-7b.wrenserve.32k", "--db", str(db), "--dry-run")
    assert code == 0 and ("engine profile wrenserve-host-8k command (host: a program on the host, no image; frozen "
                          "profile: ctx 8,192, seqs 1, vision false; the recipe's set (ctx) is not applied: a frozen "
                          "profile takes no settings): the record's engine 'wrenserve' has no launch "
                          "translation") in _why(out)
    del host["command"]
    code, out, err = _run("registry", "import", str(_native_tree(tmp_path / "bad", host)), "--db",
                          str(tmp_path / "b.sqlite3"))
    assert code == 1 and "command: a host engine profile names it (lab/lab.py render)" in err


def test_a_lab_recipe_whose_weights_are_baked_into_its_image_imports(tmp_path: Path) -> None:
    """lab.py check accepts `"weights": "baked-into-image"` (the profile's digest-pinned image holds them); any other
    unpinned name is still refused, naming the rule."""
    tree = _tree(tmp_path / "lab", PROFILE)
    recipe = tree / "recipes" / "ferro-gpu-24gb" / "wren-7b.wrenserve-exl3.32k.json"
    recipe.write_text(json.dumps({**LAB_RECIPE, "weights": "baked-into-image"}, separators=(",", ":")) + "\n")
    code, out, err = _run("registry", "import", str(tree), "--db", str(tmp_path / "r.sqlite3"))
    assert code == 0 and "0 refused" in out, out + err  # the wrong answer: "weights: not pinned", refused
    recipe.write_text(json.dumps({**LAB_RECIPE, "weights": "acme/Wren-7B-exl3"}, separators=(",", ":")) + "\n")
    code, out, err = _run("registry", "import", str(tree), "--db", str(tmp_path / "s.sqlite3"))
    assert code == 1 and "weights: not pinned as <repo>@<40-hex revision> (nor 'baked-into-image')" in err
