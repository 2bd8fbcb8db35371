"""A lab recipe's launch rendered from its engine profile as the registry's lab renders it (registry.format.lab_launch).

The profiles and recipes are written here (a fictitious "wrenserve" engine, a "ferro" card), none copied: a template
profile (defaults + config lines with ${name} placeholders, as the lab's TabbyAPI profile is) and a frozen one (the
launch as validated, as the lab's llama.cpp profiles are)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from servepack.errors import UsageError
from servepack.registry.format.lab_launch import MAX_CONFIG_CHARS, CannotRender, LabLaunch, render_lab_launch

DIGEST = "0a1b2c3d4e5f" + "6" * 52
TEMPLATE: dict[str, Any] = {
    "id": "wrenserve-exl3",
    "image": f"ghcr.io/example/wrenserve@sha256:{DIGEST}",
    "port": 5000,
    "entrypoint": "/opt/venv/bin/python3",
    "args": ["main.py", "--config", "/app/config.yml"],
    "weights_at": "/workspace/models/${name}",
    "config_at": "/app/config.yml",
    "defaults": {"ctx": 32768, "seqs": 1, "cache": "Q4", "draft": "none", "vision": False},
    "config": ["model:", "  model_name: ${name}", "  max_seq_len: ${ctx}", "  cache_size: ${cache_tokens}",
               "  cache_mode: ${cache}", "  max_batch_size: ${seqs}", "  vision: ${vision}",
               "draft_model: ${draft_block}", "price: $$0 per token"],
}
FROZEN: dict[str, Any] = {
    "id": "llama.cpp-wren-7b-q4-16k", "engine": "llama.cpp",
    "image": f"ghcr.io/example/llama.cpp@sha256:{DIGEST}", "entrypoint": None,
    "args": ["-m", "/models/wren-7b-Q4_K_M.gguf", "--ctx-size", "16384", "--parallel", "2"],
    "weights": [{"repo": "acme/Wren-7B-GGUF", "revision": "1" * 40, "at": "/models", "layout": "dir"}],
    "config": {"at": "/etc/wren.yml", "text": "ctx: ${ctx}\n"}, "ctx": 16384, "seqs": 2, "vision": True,
}
RECIPE: dict[str, Any] = {"model": "wren-7b", "weights": "acme/Wren-7B-exl3@" + "2" * 40,
                          "engine": "wrenserve-exl3@0a1b2c3d4e5f", "set": {"ctx": 65536}, "card": "ferro-gpu-24gb",
                          "proof": [{"gates": "load chat reasoning tools context speed", "tps": 40.0}]}


def _refusal(recipe: dict[str, Any], profile: object) -> str:
    with pytest.raises(CannotRender) as info:
        render_lab_launch(recipe, profile)
    assert isinstance(info.value, UsageError)  # one line, exit 2 where it ends a command
    text = str(info.value)
    assert "\n" not in text and text.startswith("cannot render: ")
    return text


def test_a_template_profile_renders_defaults_with_the_recipes_set_over_them() -> None:
    launch = render_lab_launch(RECIPE, TEMPLATE)
    assert isinstance(launch, LabLaunch) and launch.shape == "template"
    assert launch.ctx == 65536  # the recipe's set, not the profile's default 32768
    assert launch.ctx != TEMPLATE["defaults"]["ctx"]
    assert (launch.seqs, launch.vision) == (1, False)
    assert dict(launch.settings) == {"ctx": 65536, "seqs": 1, "cache": "Q4", "draft": "none", "vision": False}
    assert launch.set_keys == ("ctx",)
    assert launch.config_text == ("model:\n  model_name: Wren-7B-exl3-22222222\n  max_seq_len: 65536\n"
                                  "  cache_size: 66560\n  cache_mode: Q4\n  max_batch_size: 1\n  vision: false\n"
                                  "draft_model: {}\nprice: $0 per token\n")
    assert "${" not in launch.config_text
    assert launch.config_sha256 == hashlib.sha256(launch.config_text.encode()).hexdigest()
    assert launch.config_at == "/app/config.yml"
    assert launch.weights_at == "/workspace/models/Wren-7B-exl3-22222222"
    assert launch.argv == ("/opt/venv/bin/python3", "main.py", "--config", "/app/config.yml")
    assert launch.settings_words() == ("settings ctx 65,536 (set; default 32,768), seqs 1, cache Q4, draft none, "
                                       "vision false")
    assert launch.as_dict()["config"]["text"] == launch.config_text


def test_seqs_and_draft_set_by_the_recipe_reach_cache_tokens_and_the_draft_block() -> None:
    recipe = {**RECIPE, "set": {"ctx": 8192, "seqs": 4, "draft": "mtp", "vision": True}}
    launch = render_lab_launch(recipe, TEMPLATE)
    assert (launch.ctx, launch.seqs, launch.vision) == (8192, 4, True)
    text = launch.config_text or ""
    assert "  cache_size: 36864\n" in text  # 8192 × 4 + 1024 × 4
    assert "draft_model: {draft_mode: mtp}\n" in text and "  vision: true\n" in text


def test_a_frozen_profile_is_the_launch_as_validated_whatever_the_recipe_sets() -> None:
    recipe = {**RECIPE, "engine": "llama.cpp-wren-7b-q4-16k@0a1b2c3d4e5f", "set": {}}
    launch = render_lab_launch(recipe, FROZEN)
    assert launch.shape == "frozen"
    assert (launch.ctx, launch.seqs, launch.vision) == (16384, 2, True)
    assert launch.argv == tuple(FROZEN["args"])  # no entrypoint: the image's own program takes the args
    assert launch.program is None
    assert launch.config_text == "ctx: ${ctx}\n"  # a frozen config is literal: nothing is substituted
    assert launch.settings_words() == "frozen profile: ctx 16,384, seqs 2, vision true"
    # the lab renders a frozen profile without the recipe's set: a set ctx does not change its context
    set_anyway = render_lab_launch({**recipe, "set": {"ctx": 131072}}, FROZEN)
    assert set_anyway.ctx == 16384
    assert set_anyway.settings_words().endswith("; the recipe's set (ctx) is not applied: a frozen profile takes "
                                                "no settings")


def test_a_placeholder_nothing_fills_is_named_not_a_crash() -> None:
    profile = {**TEMPLATE, "config": [*TEMPLATE["config"], "rope: ${rope_scale}"]}
    assert _refusal(RECIPE, profile) == ("cannot render: profile wrenserve-exl3's config names ${rope_scale}, which "
                                         "neither its defaults nor the recipe sets (line 10)")
    # set by the recipe it would render, but only a setting of the profile may be set (lab.py: "not a setting")
    assert _refusal({**RECIPE, "set": {"rope_scale": 2}}, profile) == (
        "cannot render: the recipe sets rope_scale, which is not a setting of wrenserve-exl3 (its settings: cache, "
        "ctx, draft, seqs, vision)")
    with_default = {**profile, "defaults": {**TEMPLATE["defaults"], "rope_scale": 1}}
    assert "  rope: 2" not in (render_lab_launch(RECIPE, with_default).config_text or "")
    assert (render_lab_launch({**RECIPE, "set": {"rope_scale": 2}}, with_default).config_text or "").endswith(
        "rope: 2\n")


def test_derived_values_name_what_they_come_from() -> None:
    no_draft = {**TEMPLATE, "defaults": {k: v for k, v in TEMPLATE["defaults"].items() if k != "draft"}}
    assert _refusal(RECIPE, no_draft) == (
        "cannot render: profile wrenserve-exl3's config names ${draft_block}, which comes from setting draft, which "
        "neither its defaults nor the recipe sets (line 8)")
    baked = {**RECIPE, "weights": "baked-into-image"}
    assert _refusal(baked, TEMPLATE) == (
        "cannot render: profile wrenserve-exl3's config names ${name}, which comes from the recipe's weights as "
        "<repo>@<40-hex revision> (they are 'baked-into-image') (line 2)")


def test_dollar_dollar_is_a_literal_dollar_and_a_stray_dollar_is_refused() -> None:
    assert (render_lab_launch(RECIPE, {**TEMPLATE, "config": ["a: $$ctx"]}).config_text or "") == "a: $ctx\n"
    assert _refusal(RECIPE, {**TEMPLATE, "config": ["cost: 5$"]}) == (
        "cannot render: profile wrenserve-exl3's config holds a $ that starts no placeholder (line 1) (a literal $ "
        "is written $$)")


def test_an_image_other_than_the_one_the_recipe_was_proven_on_is_refused() -> None:
    other = {**TEMPLATE, "image": "ghcr.io/example/wrenserve@sha256:" + "f" * 64}
    assert _refusal(RECIPE, other) == (
        "cannot render: wrenserve-exl3@0a1b2c3d4e5f: the profile's image is now ghcr.io/example/wrenserve@sha256:"
        + "f" * 64 + ", not the build the recipe was proven on (the lab asks to rerun the recipe)")


@pytest.mark.parametrize(("recipe_set", "profile_change", "said"), [
    ({"ctx": {"tokens": 65536}}, {}, "the recipe's set.ctx is an object; a setting is a word, a number or true/false"),
    ({"cache": ["Q4"]}, {}, "the recipe's set.cache is a list; a setting is a word, a number or true/false"),
    ({"ctx": None}, {}, "the recipe's set.ctx is null; a setting is a word, a number or true/false"),
    ({1: 2}, {}, "the recipe's set has a key 1 that is no setting name"),
    ([["ctx", 1]], {}, "the recipe's set is a list, not an object of settings"),
    ({"ctx": float("nan")}, {}, "the recipe's set.ctx is nan, not a number a launch can take"),
    ({"ctx": float("inf")}, {}, "the recipe's set.ctx is inf, not a number a launch can take"),
    ({"ctx": True}, {}, "setting ctx of wrenserve-exl3 is True, not a positive whole number"),
    ({"ctx": 0}, {}, "setting ctx of wrenserve-exl3 is 0, not a positive whole number"),
    ({"ctx": 10 ** 30}, {}, "setting ctx of wrenserve-exl3 is 1000000000000000000000000000000, not a positive "
     "whole number"),
    ({"ctx": "lots"}, {}, "setting ctx of wrenserve-exl3 is 'lots', not a positive whole number"),
    ({"vision": "false"}, {}, "setting vision of wrenserve-exl3 is 'false', not true or false"),
    ({}, {"defaults": {**TEMPLATE["defaults"], "cache": "Q" * 100_000}},
     "profile wrenserve-exl3's defaults.cache is 100,000 characters long; a setting is a word or a number (at most "
     "4,096 characters)"),
    ({}, {"defaults": {**TEMPLATE["defaults"], "k" * 300: 1}},
     f"profile wrenserve-exl3's defaults has a key {repr('k' * 300)[:60]}… (302 characters) that is no setting "
     "name"),
    ({}, {"defaults": [32768]}, "profile wrenserve-exl3's defaults is a list, not an object of settings"),
    ({}, {"config": "model: ${name}"}, "profile wrenserve-exl3's config is a string, not a list of strings"),
    ({}, {"config": ["a", {"b": 1}]}, "profile wrenserve-exl3's config is not a list of strings: item 2 is an "
     "object"),
    ({}, {"config": ["${cache}" * 300], "defaults": {**TEMPLATE["defaults"], "cache": "Q" * 4096}},
     f"profile wrenserve-exl3's config would render past {MAX_CONFIG_CHARS:,} characters (line 1)"),
    ({}, {"args": "main.py --config x"}, "profile wrenserve-exl3's args is a string, not a list of strings"),
    ({}, {"entrypoint": ["python"]}, "profile wrenserve-exl3's entrypoint is a list, not a program"),
    ({}, {"weights_at": "/models/${ctx}"}, "profile wrenserve-exl3's weights_at names ${ctx}, which weights_at does "
     "not take (the lab fills it from name alone)"),
])
def test_hostile_settings_and_configs_are_one_line_each(recipe_set: Any, profile_change: dict[str, Any],
                                                        said: str) -> None:
    assert _refusal({**RECIPE, "set": recipe_set}, {**TEMPLATE, **profile_change}) == f"cannot render: {said}"


def test_many_lines_of_a_long_value_stop_at_the_rendered_size() -> None:
    """No single line is too long, but together they would be: the render stops at the size, never builds it."""
    profile = {**TEMPLATE, "config": ["${cache}"] * 1000, "defaults": {**TEMPLATE["defaults"], "cache": "Q" * 4096}}
    said = _refusal(RECIPE, profile)
    assert said.startswith(f"cannot render: profile wrenserve-exl3's config would render past "
                           f"{MAX_CONFIG_CHARS:,} characters (line ")


def test_a_profile_that_is_no_object_and_a_legacy_recipe() -> None:
    assert _refusal(RECIPE, ["not", "a", "profile"]) == ("cannot render: engine profile 'wrenserve-exl3' is a list, "
                                                         "not a profile")
    assert _refusal({**RECIPE, "engine": "registry@wren-7b-vllm"}, TEMPLATE) == (
        "cannot render: the recipe's launch is that of registry recipe 'wren-7b-vllm' (lab.py render: legacy), not "
        "an engine profile's")
    no_ctx = {k: v for k, v in FROZEN.items() if k != "ctx"}
    assert _refusal({**RECIPE, "engine": "llama.cpp-wren-7b-q4-16k@0a1b", "set": {}}, no_ctx) == (
        "cannot render: frozen profile llama.cpp-wren-7b-q4-16k states no ctx")


def test_a_host_profile_runs_its_command() -> None:
    host = {"id": "wrenserve-host-8k", "kind": "host", "port": 9000, "ctx": 8192,
            "command": "wrenserve --port 9000 --ctx 8192"}
    launch = render_lab_launch({**RECIPE, "engine": "wrenserve-host-8k@", "set": {}}, host)
    assert launch.launched == "host" and launch.image is None
    assert launch.argv == ("wrenserve", "--port", "9000", "--ctx", "8192") and launch.ctx == 8192
