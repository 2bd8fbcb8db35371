"""Issue 25 item 1: one policy for flags that run tools, serve, read or write host files — in packs (`pack
validate`), tune spaces, a record's launch (reproduce) — refused with one line naming the opt-in, unless the command
line passes `--allow-server-flag FAMILY`."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.errors import UsageError
from servepack.packs import shipped_pack_paths
from servepack.packs.flag_policy import (
    FAMILIES,
    allowed_now,
    allowing,
    check_flags,
    check_opt_ins,
    family_of,
    is_secret_flag,
    secret_flag_problem,
)
from servepack.reproduce.translate import translate_llamacpp
from servepack.tune.space import build_space, load_space

QWEN = "qwen2.5-coder-0.5b-cpu"

# (preset flag, value, family): one or more per family, as a hostile pack author would write them.
HOSTILE: list[tuple[str, str | bool, str]] = [
    ("tools", "all", "tools"),
    ("agent", True, "tools"),
    ("path", "/", "serve-files"),
    ("media-path", "/", "serve-files"),
    ("slot-save-path", "/tmp/x", "write-files"),
    ("lookup-cache-dynamic", "/tmp/x.bin", "write-files"),
    ("lcd", "/tmp/x.bin", "write-files"),
    ("log-prompts-dir", "/tmp/x", "write-files"),
    ("lookup-cache-static", "/etc/passwd", "read-files"),
    ("chat-template-file", "/etc/shadow", "read-files"),
    ("api-key-file", "/etc/shadow", "read-files"),
    ("video-ffmpeg-dir", "/tmp/bin", "exec"),
    ("models-dir", "/", "router"),
    ("models-preset", "/tmp/p.ini", "router"),
    ("mcp-servers-config", "/tmp/m.json", "mcp"),
    ("webui-mcp-proxy", True, "mcp"),
    ("hf-repo-draft", "evil/draft", "download"),
    ("mmproj-url", "https://example.invalid/p.gguf", "download"),
]
BENIGN = ["ctx-size", "n-gpu-layers", "jinja", "metrics", "alias", "parallel", "flash-attn", "cache-type-k",
          "threads", "batch-size", "spec-draft-n-max", "override-tensor", "webui", "no-webui", "slots", "props"]


@pytest.mark.parametrize(("flag", "value", "family"), HOSTILE)
def test_every_hostile_flag_is_in_its_family(flag: str, value: str | bool, family: str) -> None:
    found = family_of("llama.cpp", flag)
    assert found is not None and found.name == family
    assert family_of("llama.cpp", f"--{flag}=x") == found  # the argv forms name the same flag
    with pytest.raises(UsageError) as info:
        check_flags("llama.cpp", [flag], frozenset(), "preset 'p'")
    line = str(info.value)
    assert "\n" not in line and f"flag {flag!r}" in line and f"--allow-server-flag {family}" in line
    assert check_flags("llama.cpp", [flag], {family}, "preset 'p'") == [family]


@pytest.mark.parametrize("flag", BENIGN)
def test_measuring_flags_pass_without_an_opt_in(flag: str) -> None:
    assert family_of("llama.cpp", flag) is None
    assert check_flags("llama.cpp", [flag], frozenset(), "preset 'p'") == []


def test_an_opt_in_for_one_family_does_not_open_another() -> None:
    with pytest.raises(UsageError, match=r"flag 'path' makes the server serve files.*--allow-server-flag serve-files"):
        check_flags("llama.cpp", ["ctx-size", "tools", "path"], {"tools"}, "preset 'p'")


def test_vllm_flags_that_run_code_or_read_files_are_held_too() -> None:
    assert family_of("vllm", "trust-remote-code") == FAMILIES["exec"]
    assert family_of("vllm", "allowed-local-media-path") == FAMILIES["serve-files"]
    assert family_of("vllm", "enforce-eager") is None
    with pytest.raises(UsageError, match="--allow-server-flag exec"):
        check_flags("vllm", ["enforce-eager", "trust-remote-code"], frozenset(), "preset 'p'")


def test_opt_in_names_are_checked_and_scoped_to_the_block() -> None:
    with pytest.raises(UsageError, match=r"not a flag family; choose from tools, exec"):
        check_opt_ins(["everything"])
    assert allowed_now() == frozenset()
    with allowing(["tools", "READ-FILES"]) as got:
        assert got == allowed_now() == {"tools", "read-files"}
    assert allowed_now() == frozenset()


def test_secret_flags_are_named_and_refused_where_they_do_not_belong() -> None:
    for name in ("api-key", "--api-key", "hf-token", "hft", "ssl-key-file"):
        assert is_secret_flag(name)
    assert not is_secret_flag("cache-type-k")
    line = secret_flag_problem("api-key", "space (s.toml)")
    assert line is not None and line.startswith("space (s.toml): flag 'api-key' carries a secret")
    assert secret_flag_problem("threads", "space") is None
    assert secret_flag_problem("image-max-tokens", "space") is None  # a count of tokens, not a token
    assert build_space({"image-max-tokens": [256, 1024]}, "s", allowed=frozenset()).params["image-max-tokens"] == \
        (256, 1024)


# ---- pack validate -------------------------------------------------------------------------------------------


def _pack_with(tmp_path: Path, extra: str, *, tune: str = "") -> Path:
    text = shipped_pack_paths()[QWEN].read_text()
    anchor = 'alias = "qwen2.5-coder-0.5b"\n'
    assert anchor in text, "fixture drift"
    f = tmp_path / "pack.toml"
    f.write_text(text.replace(anchor, anchor + extra + "\n", 1) + tune)
    return f


def _validate(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["pack", "validate", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize(("flag", "value", "family"), HOSTILE)
def test_pack_validate_refuses_each_hostile_preset_flag_and_names_the_opt_in(
        tmp_path: Path, flag: str, value: str | bool, family: str) -> None:
    toml_value = "true" if value is True else f'"{value}"'
    pack = _pack_with(tmp_path, f"{flag} = {toml_value}")
    code, out, err = _validate(str(pack))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"servepack: error: {pack}: presets.default.flags: flag {flag!r}")
    assert f"--allow-server-flag {family}" in lines[0]
    code, out, err = _validate(str(pack), "--allow-server-flag", family)
    assert code == 0 and out.startswith("ok qwen2.5-coder-0.5b-cpu") and f"--allow-server-flag {family}" in out


def test_pack_validate_refuses_a_hostile_tune_table_and_a_secret_in_it(tmp_path: Path) -> None:
    pack = _pack_with(tmp_path, "", tune='\n[tune]\nthreads = [1, 2]\npath = ["/", "/etc"]\n')
    code, _, err = _validate(str(pack))
    assert code == 2 and "flag 'path'" in err and "--allow-server-flag serve-files" in err
    assert _validate(str(pack), "--allow-server-flag", "serve-files")[0] == 0
    secret = _pack_with(tmp_path, "", tune='\n[tune]\nthreads = [1, 2]\napi-key = ["sk-abc123456"]\n')
    code, _, err = _validate(str(secret), "--allow-server-flag", "read-files")
    assert code == 2 and "flag 'api-key' carries a secret" in err and "sk-abc123456" not in err


def test_an_unknown_opt_in_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = _validate(str(_pack_with(tmp_path, "")), "--allow-server-flag", "all")
    assert code == 2 and "not a flag family" in err


@pytest.mark.parametrize("pack_id", sorted(shipped_pack_paths()))
def test_shipped_packs_need_no_opt_in(pack_id: str) -> None:
    code, out, _ = _validate(str(shipped_pack_paths()[pack_id]))
    assert code == 0 and "needs" not in out


# ---- tune spaces -----------------------------------------------------------------------------------------------


def test_a_tune_space_is_held_to_the_same_policy(tmp_path: Path) -> None:
    space = tmp_path / "space.toml"
    space.write_text('[tune]\nthreads = [1, 2]\nslot-save-path = ["/tmp", "/var/tmp"]\n')
    with pytest.raises(UsageError, match=r"flag 'slot-save-path' makes the server write files.*"
                                         r"--allow-server-flag write-files"):
        load_space(space)
    with allowing(["write-files"]):
        assert load_space(space).params["slot-save-path"] == ("/tmp", "/var/tmp")
    with pytest.raises(UsageError, match="flag 'lcd' makes the server write"):  # llama-server's short name
        build_space({"lcd": ["/tmp/a"]}, "s", allowed=frozenset())


def test_a_secret_in_a_space_is_refused_even_with_every_opt_in() -> None:
    for name in ("api-key", "hf-token", "api-key-file"):
        with pytest.raises(UsageError, match=f"flag '{name}' carries a secret") as info:
            build_space({name: ["sk-secret-value-1"]}, "s", allowed=frozenset(FAMILIES))
        assert "sk-secret-value-1" not in str(info.value)


# ---- reproduce ---------------------------------------------------------------------------------------------------


def test_a_records_hostile_flags_never_reach_the_preset() -> None:
    t = translate_llamacpp(["llama-server", "-c", "4096", "--tools", "all", "--path", "/", "-lcd", "/x/cache.bin",
                            "--video-ffmpeg-dir", "/x/bin", "--mcp-servers-config", "/x/m.json", "--models-dir",
                            "/x", "--prompt-cache", "/x/p", "--jinja"], source="rec")
    assert t.flags == {"ctx-size": 4096, "jinja": True}
    dropped = {r.flag for r in t.rewrites if r.action == "dropped"}
    assert dropped == {"--tools", "--path", "-lcd", "--video-ffmpeg-dir", "--mcp-servers-config", "--models-dir",
                       "--prompt-cache"}
    cache = next(r for r in t.rewrites if r.flag == "--prompt-cache")  # in no drop table of reproduce: the policy's
    assert "flag family write-files" in cache.reason and not cache.changes_measurement
    assert next(r for r in t.rewrites if r.flag == "-lcd").changes_measurement  # it changes speculative decoding


# ---- a [topology]'s workers ----------------------------------------------------------------------------------------


def test_a_started_workers_cache_dir_is_a_host_write_held_by_the_same_policy(tmp_path: Path) -> None:
    text = shipped_pack_paths()[QWEN].read_text()
    topo = ('\n[topology]\npresets = ["default"]\n[[topology.workers]]\nport = 0\nstart = true\n'
            'cache_dir = "/etc/servepack-test"\n')
    pack = tmp_path / "rpc.toml"
    pack.write_text(text + topo)
    code, _, err = _validate(str(pack))
    assert code == 2 and "topology.workers[0].cache_dir: flag 'cache-dir'" in err
    assert "--allow-server-flag write-files" in err
    code, out, _ = _validate(str(pack), "--allow-server-flag", "write-files")
    assert code == 0 and "--allow-server-flag write-files" in out
    pack.write_text(text + topo.replace('cache_dir = "/etc/servepack-test"\n', ""))
    assert _validate(str(pack))[0] == 0  # a worker without a cache writes nothing


# ---- a flag smuggled in a value ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "flag", "family"), [
    ('metrics = "--tools"', "tools", "tools"),  # metrics takes no value: llama-server would read --tools itself
    ('jinja = "--path=/"', "path", "serve-files"),
    ('alias = "-lcd"', "lcd", "write-files"),
])
def test_a_dangerous_flag_spelled_as_a_value_is_refused_too(tmp_path: Path, extra: str, flag: str,
                                                            family: str) -> None:
    text = shipped_pack_paths()[QWEN].read_text()
    text = text.replace("metrics = true\n", "").replace("jinja = true\n", "").replace('alias = "qwen2.5-coder-0.5b"\n',
                                                                                        "")
    anchor = "[presets.default.flags]\n"
    assert anchor in text, "fixture drift"
    pack = tmp_path / "pack.toml"
    pack.write_text(text.replace(anchor, anchor + extra + "\n", 1))
    code, _, err = _validate(str(pack))
    assert code == 2 and f"flag {flag!r}" in err and f"--allow-server-flag {family}" in err
    assert _validate(str(pack), "--allow-server-flag", family)[0] == 0
    with pytest.raises(UsageError, match=f"flag {flag!r}"):
        build_space({"metrics": [extra.split(" = ")[1].strip('"'), True]}, "s", allowed=frozenset())


# ---- what servepack owns (issue 35) -------------------------------------------------------------------------------

OWNED_FLAGS = ["host", "port", "reuse-port", "api-prefix", "log-file", "log-disable", "model", "m",
               "fim-qwen-7b-default", "gpt-oss-120b-default", "embd-gemma-default", "vision-gemma-4b-default",
               "fim-qwen-14b-spec", "hf-repo", "hf", "hfr", "hf-file", "hff", "model-url", "mu", "docker-repo", "dr"]


@pytest.mark.parametrize("flag", OWNED_FLAGS)
def test_a_flag_that_takes_what_servepack_owns_is_refused_whatever_the_opt_ins(flag: str) -> None:
    every = frozenset(FAMILIES)
    for spelled in (flag, f"--{flag}", f"--{flag}=x", flag.replace("-", "_")):
        with pytest.raises(UsageError) as info:
            check_flags("llama.cpp", ["ctx-size", spelled], every, "preset 'p'")
        line = str(info.value)
        assert "\n" not in line and line.startswith(f"preset 'p': flag {flag!r} ") and "no opt-in" in line
    with pytest.raises(UsageError, match=f"flag {flag!r}"):  # a tune space, even with every family allowed
        build_space({"threads": [1, 2], flag: ["x", "y"]}, "s", allowed=every)
    assert check_flags("vllm", [flag], every, "p") == []  # vLLM's own flags: its reserved list holds those


@pytest.mark.parametrize("preset_flag", ["fim-qwen-7b-default", "gpt-oss-120b-default", "vision-gemma-4b-default"])
def test_pack_validate_refuses_a_model_preset_flag_with_every_opt_in(tmp_path: Path, preset_flag: str) -> None:
    pack = _pack_with(tmp_path, f"{preset_flag} = true")
    args = [str(pack)] + [a for f in FAMILIES for a in ("--allow-server-flag", f)]
    code, out, err = _validate(*args)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert f"flag {preset_flag!r} is a llama-server model preset: it downloads its own model" in lines[0]
    assert "listens on its own port (80" in lines[0] and "no opt-in lets it through" in lines[0]


def test_an_owned_flag_spelled_as_a_value_is_refused_too(tmp_path: Path) -> None:
    pack = _pack_with(tmp_path, 'reasoning-format = "--port"')  # a value spelled as a flag reaches argv as one
    code, _, err = _validate(str(pack))
    assert code == 2 and "flag 'port' sets the port the server listens on" in err


def test_the_measuring_flags_are_not_owned() -> None:
    for flag in [*BENIGN, "spec-default", "ctx-size", "c", "parallel", "fit", "no-host"]:
        with allowing([]):
            assert check_flags("llama.cpp", [flag], frozenset(), "p") == [], flag


# ---- model sources (issue 35, round 4 left-over): a download that would replace the hashed model ------------------

# (flag as a pack author writes it, the long name llama-server reads it as, a value)
MODEL_SOURCE_FLAGS = [("hf-repo", "hf-repo", "evil/model:Q4_K_M"), ("hf", "hf-repo", "evil/model"),
                      ("hfr", "hf-repo", "evil/model"), ("hf-file", "hf-file", "evil.gguf"),
                      ("hff", "hf-file", "evil.gguf"), ("model-url", "model-url", "https://example.invalid/m.gguf"),
                      ("mu", "model-url", "https://example.invalid/m.gguf"), ("docker-repo", "docker-repo", "gemma3"),
                      ("dr", "docker-repo", "ai/gemma3")]


@pytest.mark.parametrize(("flag", "long", "value"), MODEL_SOURCE_FLAGS)
def test_a_model_source_is_refused_even_with_the_download_opt_in(tmp_path: Path, flag: str, long: str,
                                                                 value: str) -> None:
    """The wrong answer: with `--allow-server-flag download` it validated, launched and replaced the hashed model."""
    assert family_of("llama.cpp", flag) is None  # owned, in no family an opt-in could open
    every = frozenset(FAMILIES)
    with pytest.raises(UsageError) as info:
        check_flags("llama.cpp", ["ctx-size", f"--{flag}"], every, "preset 'p'")
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"preset 'p': flag {flag!r} names where the server gets its model "
                                                f"({long})")
    assert "no opt-in lets it through: pin the model in the pack's [model] table" in line
    with pytest.raises(UsageError, match=f"flag {flag!r} names where the server gets its model"):
        build_space({"threads": [1, 2], flag: [value, "x/y"]}, "s", allowed=every)
    with pytest.raises(UsageError, match=f"flag {flag!r} names where the server gets its model"):
        build_space({"alias": [f"--{flag}", "a"]}, "s", allowed=every)  # spelled as a value
    pack = _pack_with(tmp_path, f'{flag} = "{value}"')
    code, out, err = _validate(str(pack), "--allow-server-flag", "download")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert f"presets.default.flags: flag {flag!r} names where the server gets its model" in lines[0]
    assert "pin the model in the pack" in lines[0]
    tuned = _pack_with(tmp_path, "", tune=f'\n[tune]\nthreads = [1, 2]\n{flag} = ["{value}", "x/y"]\n')
    code, _, err = _validate(str(tuned), *[a for f in FAMILIES for a in ("--allow-server-flag", f)])
    assert code == 2 and f"flag {flag!r}" in err and "pin the model in the pack" in err


def test_a_records_model_source_is_dropped_as_the_policy_owns_it() -> None:
    """reproduce drops what the policy owns as a model source, by the same table (short names too)."""
    t = translate_llamacpp(["llama-server", "-hf", "org/m:Q8_0", "-hff", "m.gguf", "-mu", "https://x.invalid/m",
                            "-dr", "gemma3", "-c", "2048"], source="rec")
    assert t.flags == {"ctx-size": 2048}
    assert {r.flag for r in t.rewrites if r.action == "dropped"} == {"-hf", "-hff", "-mu", "-dr"}
    assert all("local model file replaces it" in r.reason for r in t.rewrites if r.action == "dropped")


def test_other_downloads_stay_a_family_the_opt_in_opens() -> None:
    """A draft model or a projector download does not replace the hashed model: family download, as before."""
    for flag in ("hf-repo-draft", "hfd", "spec-draft-hf", "mmproj-url", "mmu"):
        assert check_flags("llama.cpp", [flag], {"download"}, "p") == ["download"]


# ---- one rule for secret names (issue 35, round 4 left-over) -------------------------------------------------------

# (name, secret?): the near-miss table. The word inside a name, a count, a key of another kind are not secrets.
SECRET_NAMES: list[tuple[str, bool]] = [
    ("api-key", True), ("--api-key", True), ("api_key", True), ("api-key-file", True), ("ssl-key-file", True),
    ("hf-token", True), ("hft", True), ("-hft", True), ("HF_TOKEN", True), ("HF_TOKEN_PATH", True),
    ("token", True), ("auth", True), ("password", True), ("cookie", True), ("credentials", True),
    ("long-prefill-token-threshold", False), ("max-tokens", False), ("--max-tokens", False),
    ("image-max-tokens", False), ("n_tokens", False), ("key-value-cache", False), ("keep", False),
    ("token-healing", False), ("tokenizer", False), ("cache-type-k", False), ("auth-mode-switch", False),
    ("secret-sauce-level", False), ("passes", False), ("bypass", False), ("monkey", False),
]


@pytest.mark.parametrize(("name", "secret"), SECRET_NAMES)
def test_the_near_miss_table_is_one_rule_for_the_policy_and_redaction(name: str, secret: bool) -> None:
    """The wrong answer: `--long-prefill-token-threshold` and `--max-tokens` were secret flags for tune spaces
    (refused) while redaction kept their values; now both read one rule."""
    from servepack.redact import is_secret_name
    assert is_secret_flag(name) is secret
    assert is_secret_name(name) is secret
    problem = secret_flag_problem(name, "space")
    assert (problem is not None) is secret
    flag = name.lstrip("-").lower().replace("_", "-")  # a space names llama-server's flag as the server reads it
    if secret:
        with pytest.raises(UsageError, match="carries a secret"):
            build_space({flag: ["sk-abcdef-1", "sk-abcdef-2"]}, "s", allowed=frozenset(FAMILIES))
    else:
        assert build_space({flag: [256, 1024]}, "s", allowed=frozenset()).params[flag] == (256, 1024)


def test_pack_validate_takes_a_near_miss_in_its_tune_table(tmp_path: Path) -> None:
    pack = _pack_with(tmp_path, "", tune="\n[tune]\nthreads = [1, 2]\nmax-tokens = [128, 256]\n"
                                         "long-prefill-token-threshold = [64, 512]\n")
    code, out, err = _validate(str(pack))
    assert code == 0 and out.startswith("ok qwen2.5-coder-0.5b-cpu"), err
    secret = _pack_with(tmp_path, "", tune='\n[tune]\nthreads = [1, 2]\nhf-token = ["hf_abcdefgh", "hf_ijklmnop"]\n')
    code, _, err = _validate(str(secret))
    assert code == 2 and "flag 'hf-token' carries a secret" in err and "hf_abcdefgh" not in err
