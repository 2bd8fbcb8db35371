"""What a recipe record says, as `registry choose` reads it: its launch arguments and flags, the weights it pins
(`model_pins`), the context it launches with (`recipe_context`; a lab recipe's as the lab renders it) and the
largest it measured (`measured_context`), and the engine it names (a lemonade lab profile's: llama.cpp, whose
llama-server lemonade starts with the args and context the profile states, `lemonade_of`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from servepack.registry.format import LoadedRecord, lab_engine_name, lab_launch_of, launch_steps
from servepack.registry.format.lab_launch import CannotRender, LabLaunch
from servepack.registry.format.lemonade import LemonadeLaunch, is_lemonade, lemonade_llamacpp
from servepack.registry.index import lab_context
from servepack.registry.queries import StoredRecord, SweepRow

SHA_IN_NOTES = re.compile(r"sha-?256[^0-9a-f]{0,24}([0-9a-f]{64})", re.IGNORECASE)
PROMPT_IN_NOTES = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+) (?:endpoint |prompt )?tokens", re.IGNORECASE)


def launch_args(loaded: LoadedRecord) -> list[str]:
    """The record's launch as arguments: a lab recipe's engine profile args (a lemonade profile's llama-server
    launch); the record's own launch contract
    (its arguments, a script's llama.cpp step); else its observed command (tokenized form first, else its command
    string)."""
    profile = loaded.related.get("engine_profile")
    lemon = lemonade_of(loaded)
    if isinstance(lemon, LemonadeLaunch):  # lemonade starts llama-server with the args and context it states
        return list(lemon.argv)
    if isinstance(profile, dict) and isinstance(profile.get("args"), list):
        return [a for a in profile["args"] if isinstance(a, str)]
    launch = loaded.record.get("launch") if isinstance(loaded.record.get("launch"), dict) else None
    cmd = loaded.observed_command()
    # the record's own launch first (issue 33: a launch promoted from an observed command carries both)
    own = launch.get("arguments") if launch and launch.get("kind") != "reference" else None
    if isinstance(own, list) and own:
        return [a for a in own if isinstance(a, str)]
    if launch and launch.get("kind") == "script":  # a script launch: its llama.cpp step
        for step in launch_steps(launch)[1]:
            if "llama" in Path(step[0]).name:
                return step
    if not cmd:
        return []
    args = cmd.get("arguments")
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        return list(args)
    text = cmd.get("command")
    try:
        return shlex.split(text) if isinstance(text, str) else []
    except ValueError:
        return []


def lemonade_of(loaded: LoadedRecord) -> LemonadeLaunch | CannotRender | None:
    """A lab recipe's lemonade launch (`registry.format.lemonade`: the llama-server args and context its profile
    states), or why it cannot be read; None for any other record or profile."""
    profile = loaded.related.get("engine_profile")
    rendered = lab_launch_of(loaded)
    if not (isinstance(profile, dict) and isinstance(rendered, LabLaunch) and is_lemonade(profile, rendered)):
        return None
    try:
        return lemonade_llamacpp(rendered.profile_id, rendered)
    except CannotRender as exc:
        return exc


@dataclass(frozen=True)
class Placement:
    """Where a llama.cpp launch puts the model's weights: `gpu` (every layer offloaded, nothing kept back), `host`
    (none offloaded: -ngl 0), `split` (some in VRAM, some in host RAM: --n-cpu-moe, --cpu-moe, -ot …=CPU, or a
    partial -ngl), `unknown` (the launch does not say); `why` names the flags read."""

    where: str
    why: str


DEFAULT_CONTEXT = 8192  # the context `registry choose` ranks at unless asked: the registry's decode mark (decode8k_tps)
ALL_LAYERS = 99  # -ngl 99 / 999 / all: every layer of any model llama.cpp loads today


def weights_placement(args: list[str]) -> Placement:
    """Where the launch in `args` puts the weights (see `Placement`), from its own flags."""
    ngl = flag_value(args, "-ngl", "--n-gpu-layers", "--gpu-layers")
    kept: list[str] = []
    if "--cpu-moe" in args or "-cmoe" in args:
        kept.append("--cpu-moe keeps every expert tensor in host RAM")
    n_moe = flag_value(args, "--n-cpu-moe", "-ncmoe")
    if n_moe is not None and n_moe.strip() not in ("", "0"):
        kept.append(f"--n-cpu-moe {n_moe} keeps the experts of {n_moe} layers in host RAM")
    for i, a in enumerate(args):
        value = args[i + 1] if a in ("-ot", "--override-tensor") and i + 1 < len(args) else \
            a.split("=", 1)[1] if a.startswith(("-ot=", "--override-tensor=")) else None
        if value is not None and re.search(r"=\s*CPU\b", value, re.IGNORECASE):
            kept.append(f"-ot {value} keeps those tensors in host RAM")
    if ngl is not None and ngl.strip() == "0":
        return Placement("host", "-ngl 0: no layer on the GPU, the weights in host RAM")
    if kept:
        return Placement("split", "; ".join(kept) + (f" (-ngl {ngl})" if ngl else ""))
    if ngl is not None and (ngl.strip().lower() in ("all", "-1") or (ngl.isdigit() and int(ngl) >= ALL_LAYERS)):
        return Placement("gpu", f"-ngl {ngl}: every layer on the GPU")
    if ngl is not None and ngl.strip().lower() == "auto":
        return Placement("unknown", "-ngl auto: llama.cpp puts on the GPU what fits there, the rest in host RAM")
    if ngl is not None and ngl.isdigit():
        return Placement("split", f"-ngl {ngl}: that many layers on the GPU, the rest in host RAM")
    return Placement("unknown", "the launch does not say where the weights go (no -ngl)")


def flag_value(args: list[str], *names: str) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


@dataclass(frozen=True)
class ModelPins:
    sha256: tuple[str, ...]
    file_names: tuple[str, ...]


def model_pins(loaded: LoadedRecord) -> ModelPins:
    """The sha256 values and file names a recipe gives for its weights (servepack metadata, notes, its command)."""
    shas: list[str] = []
    for value in (loaded.record.get("metadata") or {}).values():
        if isinstance(value, dict) and isinstance(value.get("model_sha256"), str):
            shas.append(value["model_sha256"])
    for text in loaded.notes.values():
        shas += [m.lower() for m in SHA_IN_NOTES.findall(text)]
    names = []
    # -m / --model name the weights file for llama.cpp's tools only: `python -m sglang.launch_server` is a module
    engine = recipe_engine(loaded)
    model = flag_value(launch_args(loaded), "--model", "-m") if engine in (None, "llama.cpp") else None
    if model and not model.startswith("-"):  # a command recorded with an empty -m has the next flag there
        names.append(Path(model).name)
    return ModelPins(tuple(dict.fromkeys(shas)), tuple(dict.fromkeys(names)))


def recipe_context(loaded: LoadedRecord) -> int | None:
    """The context the recipe launches with: --ctx-size in its command, else serving.max_context_tokens. A lab
    recipe: the ctx of its launch as the lab renders it from its engine profile (a template profile's defaults with
    the recipe's `set` over them, a frozen profile's own ctx), whatever its file name says; None when it cannot be
    rendered (`unrendered` says why); the <n>k its file name states only when the profile is not held."""
    if loaded.kind == "lab_recipe":
        launch = lab_launch_of(loaded)
        if launch is None:
            return lab_context(loaded.path.stem)
        return None if isinstance(launch, CannotRender) or isinstance(lemonade_of(loaded), CannotRender) else \
            launch.ctx
    v = flag_value(launch_args(loaded), "--ctx-size", "-c")
    if v and v.isdigit():
        return int(v)
    ctx = (loaded.record.get("serving") or {}).get("max_context_tokens")
    return ctx if isinstance(ctx, int) and not isinstance(ctx, bool) else None


def unrendered(loaded: LoadedRecord) -> str | None:
    """Why a lab recipe's launch cannot be rendered from its held engine profile ("cannot render: …"; a lemonade
    profile's llama-server args or context that cannot be read too), else None."""
    launch = lab_launch_of(loaded) if loaded.kind == "lab_recipe" else None
    if isinstance(launch, CannotRender):
        return str(launch)
    lemon = lemonade_of(loaded) if launch is not None else None
    return str(lemon) if isinstance(lemon, CannotRender) else None


def measured_context(loaded: LoadedRecord, sweeps: list[tuple[StoredRecord, list[SweepRow]]]) -> int | None:
    """The largest context the record measured: its sweeps' rows, else the prompt size its notes state."""
    rows = [r.context_tokens for _, rs in sweeps for r in rs if r.context_tokens is not None and r.status != "failed"]
    if rows:
        return max(rows)
    for text in loaded.notes.values():
        m = PROMPT_IN_NOTES.search(text)
        if m:
            return int(m.group(1).replace(",", ""))
    return None


def recipe_engine(loaded: LoadedRecord) -> str | None:
    """The engine a recipe names (a lab recipe's, from its engine profile), or None."""
    if loaded.kind == "lab_recipe":
        if lemonade_of(loaded) is not None:  # lemonade serves it with llama.cpp's llama-server, as reproduce runs it
            return "llama.cpp"
        return lab_engine_name(loaded.record, loaded.related.get("engine_profile"))
    engine = loaded.record.get("engine") or {}
    name = engine.get("name") if isinstance(engine, dict) else None
    return name if isinstance(name, str) else None
