"""A lemonade engine profile's llama.cpp launch: the llama-server args and context it states, read from where
lemonade keeps them.

Lemonade (lemonade-server) serves a GGUF by starting llama.cpp's llama-server itself; what it adds to that launch is
stated in three places, each of which a lab profile may carry:

- the program's own flags: `lemonade-server serve --ctx-size N --llamacpp BACKEND --llamacpp-args "ARGS"`;
- a per-model options file (lemonade's `recipe_options.json`): `{"<model>": {"ctx_size": N, "llamacpp_backend": B,
  "llamacpp_args": "ARGS"}}`, or those keys at the top of the file;
- its configuration file: `{"ctx_size": N, "llamacpp": {"backend": B, "args": "ARGS", "<backend>_args": "ARGS"}}`
  (a backend's own args, where given and not empty, before the general ones, as lemonade reads them).

`lemonade_llamacpp` gives the llama-server argv they make (`llama-server ARGS --ctx-size N`) and where each part
came from; the caller passes it through the same flag table and policy as any launch. Where the places disagree (two
args strings, two contexts), where the config is no JSON or names several models with different options, it raises
`CannotRender` naming both: which one served is not known, so nothing is guessed. Lemonade's own additions to the
launch (the model path, its port, its backend's defaults) are not stated by a profile and are named in the notes.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servepack.registry.format.lab_launch import MAX_TOKENS, CannotRender, LabLaunch

SERVER = "llama-server"
_CTX_FLAGS = ("-c", "--ctx-size")
_OPTION_KEYS = ("ctx_size", "llamacpp_args", "llamacpp_backend", "llamacpp")
_SHOWN = 80


@dataclass(frozen=True)
class LemonadeLaunch:
    """The llama-server launch a lemonade profile states: argv (llama-server first), its context, and in words where
    the args and the context were read and what lemonade adds that the profile does not state."""

    argv: tuple[str, ...]
    ctx: int
    args_where: str
    ctx_where: str
    notes: tuple[str, ...]


def is_lemonade(profile: Mapping[str, Any], launch: LabLaunch) -> bool:
    """Whether the profile runs lemonade: its engine, id or backend names it, or its image or program does."""
    named = (profile.get("engine"), profile.get("id"), profile.get("backend"), launch.image, launch.program)
    return any(isinstance(w, str) and "lemonade" in w.lower() for w in named)


def _short(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN else repr(text[:_SHOWN]) + f"… ({len(text):,} characters)"


def _ctx_value(what: str, v: object) -> int:
    n = v if isinstance(v, int) and not isinstance(v, bool) else \
        int(v) if isinstance(v, str) and v.strip().isdigit() and len(v.strip()) <= 15 else None
    if n is None or not 0 < n <= MAX_TOKENS:
        raise CannotRender(f"{what} is {_short(str(v))}, not a positive whole number of tokens")
    return n


def _flag(args: tuple[str, ...], *names: str) -> list[str]:
    """Every value `args` gives any of `names` (`--x V` or `--x=V`)."""
    out = []
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                out.append(args[i + 1])
            elif a.startswith(n + "="):
                out.append(a.split("=", 1)[1])
    return out


def _options(pid: str, launch: LabLaunch) -> list[tuple[str, Mapping[str, Any]]]:
    """The option sets the config states (where, options): its top level, or one per model it names."""
    if launch.config_text is None:
        return []
    at = launch.config_at or "(no place stated)"
    try:
        doc = json.loads(launch.config_text)
    except ValueError:
        raise CannotRender(f"lemonade profile {pid}'s config {at} is not JSON, so the llama.cpp args and ctx_size "
                           "lemonade reads from it cannot be read") from None
    if not isinstance(doc, dict):
        return []
    found: list[tuple[str, Mapping[str, Any]]] = []
    if any(k in doc for k in _OPTION_KEYS):
        found.append((f"config {at}", doc))
    per_model = [(k, v) for k, v in doc.items() if isinstance(v, dict) and any(x in v for x in _OPTION_KEYS)
                 and k != "llamacpp"]
    if len({json.dumps(v, sort_keys=True) for _, v in per_model}) > 1:
        raise CannotRender(f"lemonade profile {pid}'s config {at} states options for "
                           f"{', '.join(_short(k) for k, _ in per_model[:5])}, which differ; which model the recipe "
                           "served is not known")
    found += [(f"config {at} ({_short(k)})", v) for k, v in per_model[:1]]
    return found


def _config_args(where: str, options: Mapping[str, Any]) -> tuple[list[tuple[str, str]], str | None]:
    """(args strings with where each is from, backend) one option set states."""
    out: list[tuple[str, str]] = []
    backend = options.get("llamacpp_backend")
    block = options.get("llamacpp")
    if isinstance(block, dict):
        backend = block.get("backend") if isinstance(block.get("backend"), str) else backend
        own = block.get(f"{backend}_args") if isinstance(backend, str) else None
        if isinstance(own, str) and own.strip():
            out.append((f"{where} llamacpp.{backend}_args", own))
        elif isinstance(block.get("args"), str):
            out.append((f"{where} llamacpp.args", block["args"]))
    if isinstance(options.get("llamacpp_args"), str):
        out.append((f"{where} llamacpp_args", options["llamacpp_args"]))
    return out, backend if isinstance(backend, str) else None


def lemonade_llamacpp(pid: str, launch: LabLaunch) -> LemonadeLaunch:
    """The llama-server launch lemonade profile `pid` (rendered as `launch`) states; CannotRender where its parts
    disagree or cannot be read."""
    args_said: list[tuple[str, str]] = [(f"{launch.program or 'the program'} --llamacpp-args", v)
                                        for v in _flag(launch.args, "--llamacpp-args")]
    ctx_said: list[tuple[str, int]] = [(f"{launch.program or 'the program'} --ctx-size",
                                        _ctx_value(f"lemonade profile {pid}'s --ctx-size", v))
                                       for v in _flag(launch.args, "--ctx-size")]
    backends = [(f"{launch.program or 'the program'} --llamacpp", v) for v in _flag(launch.args, "--llamacpp")]
    for where, options in _options(pid, launch):
        said, backend = _config_args(where, options)
        args_said += said
        if backend:
            backends.append((where, backend))
        if "ctx_size" in options:
            ctx_said.append((f"{where} ctx_size", _ctx_value(f"{where} ctx_size", options["ctx_size"])))
    texts = {" ".join(v.split()) for _, v in args_said}
    if len(texts) > 1:
        raise CannotRender(f"lemonade profile {pid} states two llama.cpp args: "
                           + "; ".join(f"{w} {_short(v)}" for w, v in args_said[:3])
                           + "; which one served is not known")
    args_text = args_said[0][1] if args_said else ""
    try:
        args = shlex.split(args_text)
    except ValueError:
        raise CannotRender(f"lemonade profile {pid}'s llama.cpp args {_short(args_text)} do not split into words "
                           "(unbalanced quotes)") from None
    ctx_said += [(f"{args_said[0][0]} {v.split('=')[0]}", _ctx_value(f"the llama.cpp args' context {v}", v))
                 for v in _flag(tuple(args), *_CTX_FLAGS)]
    ctx_said.append((f"the profile's ctx (lab settings: {launch.settings_words()})", launch.ctx))
    if len({n for _, n in ctx_said}) > 1:
        raise CannotRender(f"lemonade profile {pid} states two contexts: "
                           + "; ".join(f"{w} {n:,}" for w, n in ctx_said[:4])
                           + "; which one served is not known")
    ctx_where, ctx = ctx_said[0]
    argv = (SERVER, *args) + (() if _flag(tuple(args), *_CTX_FLAGS) else ("--ctx-size", str(ctx)))
    notes = [f"lemonade starts llama-server itself and adds the model, its port and its backend's defaults, which "
             f"profile {pid} does not state: only the args and context it states are run here"]
    if backends:
        notes.append(f"llama.cpp backend {backends[0][1]} ({backends[0][0]}) on the recorded host; here the pack's "
                     "llama-server build")
    if launch.seqs > 1 and not _flag(tuple(args), "-np", "--parallel"):
        notes.append(f"the profile's seqs {launch.seqs} is the lab's setting; its llama.cpp args set no --parallel, "
                     "so the local llama-server's default slots serve")
    return LemonadeLaunch(argv, ctx, args_said[0][0] if args_said else "no llama.cpp args stated", ctx_where,
                          tuple(notes))
