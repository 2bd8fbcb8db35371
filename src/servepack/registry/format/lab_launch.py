"""A lab recipe's launch, rendered from the engine profile its `engine` field names, as the registry's lab does it.

The local-ai-registry's lab (`lab/lab.py render`) keeps a recipe small: it names its weights, an engine profile
(`<profile id>@<image digest prefix>`) and only the settings that differ from the profile's defaults (`set`). The
launch is rendered from the profile, in one of two shapes:

- a frozen profile (no `defaults`): the launch exactly as it was validated — literal `args`, `ctx`, `seqs`,
  `vision`, a `weights` list and a literal config (or none). The lab renders it whatever the recipe's `set` says;
  servepack does the same and names the settings it did not apply.
- a template profile (`defaults`): the settings are the defaults with the recipe's `set` over them; the values
  `name` (from the weights: `<repo name>-<revision[:8]>`), `cache_tokens` (ctx × seqs + 1,024 × seqs) and
  `draft_block` (from `draft`) are added; every `config` line is a `string.Template` (`${ctx}`, `$$` a literal `$`)
  filled from them, `weights_at` from `name`; ctx, seqs and vision are the settings'.

`render_lab_launch` is pure (the recipe and its profile in, a `LabLaunch` or `CannotRender` out): choose checks the
rendered context, reproduce runs the rendered argv, `registry show` prints the rendered launch. Where the lab itself
would stop (a `set` key that is no setting of the profile, a placeholder nothing fills, an image other than the one
the recipe was proven on), `CannotRender` says so in one line starting "cannot render:". Where the lab would crash on
a field a profile leaves out, servepack fills what the lab's frozen branch fills (seqs 1, vision false, no config)
and derives `cache_tokens` / `draft_block` only from settings that are there; a config that names one not derived is
refused by name.
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from servepack.errors import UsageError

MAX_SETTING_CHARS = 4096  # a setting is a word or a number (Q4, qwen3_coder, 65536); longer is no setting
MAX_CONFIG_CHARS = 1 << 20  # a rendered config file (TabbyAPI's is ~1 KiB); a bigger one is not rendered
MAX_NAME_CHARS = 200  # a setting's name (ctx, cache, tools)
MAX_TOKENS = 1 << 40  # a context or sequence count past this is no launch setting
_PINNED = re.compile(r"([\w.-]+)/([\w.-]+)@([0-9a-f]{40})")
_SHOWN = 60  # characters of a setting's value shown in a one-line summary

Scalar = str | int | float | bool
Shape = Literal["frozen", "template"]


class CannotRender(UsageError):
    """The lab recipe's launch cannot be rendered from its profile; the message starts "cannot render:"."""

    def __init__(self, why: str) -> None:
        super().__init__(f"cannot render: {why}")


@dataclass(frozen=True)
class LabLaunch:
    """What a program runs for a lab recipe: the program and its args (in the profile's image, or on the host), the
    settings it was rendered with, the config file written beside it, the weights' place, and ctx / seqs / vision."""

    profile_id: str
    shape: Shape
    launched: str  # "container" (the profile's image), "host" (a command on the host), "native" (args, no image)
    image: str | None
    program: str | None  # the entrypoint; None: the image's own
    args: tuple[str, ...]
    ctx: int
    seqs: int
    vision: bool
    settings: Mapping[str, Scalar] = field(default_factory=dict)  # template: defaults with the recipe's set over
    set_keys: tuple[str, ...] = ()  # the settings the recipe set (a frozen profile: set, and not applied)
    defaults: Mapping[str, Scalar] = field(default_factory=dict)
    config_at: str | None = None
    config_text: str | None = None
    weights: str | None = None  # the recipe's <repo>@<revision>
    weights_at: str | None = None

    @property
    def config_sha256(self) -> str | None:
        return hashlib.sha256(self.config_text.encode()).hexdigest() if self.config_text is not None else None

    @property
    def argv(self) -> tuple[str, ...]:
        """Program first when the profile names one; else the args the image's own entrypoint takes."""
        return (self.program, *self.args) if self.program else self.args

    def settings_words(self) -> str:
        """`ctx 65,536 (set; default 32,768), seqs 1, cache Q4, vision false` — or a frozen profile's three."""
        if self.shape == "frozen":
            unused = (f"; the recipe's set ({_listed(list(self.set_keys))}) is not applied: a frozen profile takes "
                      "no settings" if self.set_keys else "")
            return f"frozen profile: ctx {self.ctx:,}, seqs {self.seqs}, vision {_word(self.vision)}{unused}"
        parts = []
        for k, v in self.settings.items():
            said = f"{k} {_shown(v)}"
            if k in self.set_keys:
                said += f" (set; default {_shown(self.defaults[k])})" if k in self.defaults else " (set)"
            parts.append(said)
        return "settings " + ", ".join(parts) if parts else "no settings"

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile_id, "shape": self.shape, "launched": self.launched, "image": self.image,
                "program": self.program, "args": list(self.args), "argv": list(self.argv),
                "settings": dict(self.settings), "set": list(self.set_keys),
                "config": ({"at": self.config_at, "text": self.config_text, "sha256": self.config_sha256}
                           if self.config_text is not None else None),
                "weights": self.weights, "weights_at": self.weights_at,
                "ctx": self.ctx, "seqs": self.seqs, "vision": self.vision}


def _word(v: Scalar) -> str:
    """A value as the lab writes it into a config: booleans lower-case (`true`), the rest as Python prints them."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def _shown(v: Scalar) -> str:
    text = f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else _word(v)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + f"… ({len(text):,} characters)"


def _named(v: object) -> str:
    """A value named in a message, never at length."""
    text = repr(v)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + f"… ({len(text):,} characters)"


def _listed(names: list[str], most: int = 20) -> str:
    """Names in a message: the first `most`, and how many more."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most:,} more" if len(names) > most else "")


def _kind_of(v: object) -> str:
    return {dict: "an object", list: "a list", type(None): "null", str: "a string", bool: "true/false",
            int: "a number", float: "a number"}.get(type(v), type(v).__name__)


def _settings(what: str, given: object) -> dict[str, Scalar]:
    """`defaults` or `set` as names to words / numbers / true-false; CannotRender for any other shape."""
    if not isinstance(given, dict):
        raise CannotRender(f"{what} is {_kind_of(given)}, not an object of settings")
    out: dict[str, Scalar] = {}
    for k, v in given.items():
        if not isinstance(k, str) or not k or len(k) > MAX_NAME_CHARS:
            raise CannotRender(f"{what} has a key {_named(k)} that is no setting name")
        if isinstance(v, float) and not math.isfinite(v):
            raise CannotRender(f"{what}.{k} is {v}, not a number a launch can take")
        if not isinstance(v, str | int | float | bool):
            raise CannotRender(f"{what}.{k} is {_kind_of(v)}; a setting is a word, a number or true/false")
        if isinstance(v, str) and len(v) > MAX_SETTING_CHARS:
            raise CannotRender(f"{what}.{k} is {len(v):,} characters long; a setting is a word or a number (at "
                               f"most {MAX_SETTING_CHARS:,} characters)")
        out[k] = v
    return out


def _whole(what: str, v: object, default: int | None = None) -> int:
    """A positive whole number of tokens or sequences, as the lab's int() reads it (65536, 65536.0, "65536")."""
    if v is None and default is not None:
        return default
    n: int | None = None
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif isinstance(v, float) and math.isfinite(v) and v.is_integer():
        n = int(v)
    elif isinstance(v, str) and v.strip().isdigit() and len(v.strip()) <= 15:
        n = int(v.strip())
    if n is None or not 0 < n <= MAX_TOKENS:
        raise CannotRender(f"{what} is {_named(v)}, not a positive whole number")
    return n


def _truth(what: str, v: object) -> bool:
    if v is None:
        return False
    if not isinstance(v, bool):
        raise CannotRender(f"{what} is {_named(v)}, not true or false")
    return v


def _image_matches(ref: str, profile: dict[str, Any], pid: str) -> str | None:
    """The profile's image, checked against the recipe's digest prefix as the lab's profile() does."""
    image = profile.get("image")
    _, _, prefix = ref.partition("@")
    if image is None:
        return None
    if not isinstance(image, str):
        raise CannotRender(f"profile {pid}'s image is {_kind_of(image)}, not an image reference")
    if prefix:
        digest = image.split("@sha256:", 1)[1] if "@sha256:" in image else None
        if digest is None:
            raise CannotRender(f"the recipe names {ref} but profile {pid}'s image {_named(image)} is not pinned by "
                               "@sha256 digest, so the build the recipe was proven on cannot be checked")
        if not digest.startswith(prefix):
            raise CannotRender(f"{ref}: the profile's image is now {image}, not the build the recipe was proven on "
                               "(the lab asks to rerun the recipe)")
    return image


def _strings(what: str, v: object) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise CannotRender(f"{what} is {_kind_of(v)}, not a list of strings")
    bad = next((i for i, a in enumerate(v) if not isinstance(a, str)), None)
    if bad is not None:
        raise CannotRender(f"{what} is not a list of strings: item {bad + 1} is {_kind_of(v[bad])}")
    return tuple(v)


def _fill(pid: str, where: str, text: str, values: Mapping[str, object], longest: int, budget: int,
          origin: Mapping[str, str], line: int | None = None) -> str:
    """`text` with its placeholders filled (string.Template: `${name}` / `$name`, `$$` a literal `$`)."""
    at = f" (line {line})" if line is not None else ""
    if len(text) + text.count("$") * longest > budget:
        raise CannotRender(f"profile {pid}'s {where} would render past {MAX_CONFIG_CHARS:,} characters{at}")
    try:
        return string.Template(text).substitute(values)
    except KeyError as exc:
        name = str(exc.args[0])[:_SHOWN] if exc.args else "?"
        why = origin.get(name, "which neither its defaults nor the recipe sets")
        raise CannotRender(f"profile {pid}'s {where} names ${{{name}}}, {why}{at}") from None
    except ValueError:
        raise CannotRender(f"profile {pid}'s {where} holds a $ that starts no placeholder{at} (a literal $ is "
                           "written $$)") from None


def render_lab_launch(recipe: Mapping[str, Any], profile: object) -> LabLaunch:
    """The launch of lab recipe `recipe` from engine profile `profile` (the record its `engine` names), rendered as
    the lab renders it; CannotRender (a UsageError, one line) where the lab could not render it either."""
    ref = recipe.get("engine")
    if not isinstance(ref, str) or not ref:
        raise CannotRender("the recipe names no engine profile (its engine field)")
    if ref.startswith("registry@"):
        raise CannotRender(f"the recipe's launch is that of registry recipe {ref.split('@', 1)[1]!r} (lab.py "
                           "render: legacy), not an engine profile's")
    if not isinstance(profile, dict):
        raise CannotRender(f"engine profile {ref.split('@', 1)[0]!r} is {_kind_of(profile)}, not a profile")
    pid = str(profile.get("id") or ref.split("@", 1)[0])[:200]
    launched = profile.get("kind") if profile.get("kind") in ("host", "native") else "container"
    image = None if launched == "host" else _image_matches(ref, profile, pid)
    given = recipe.get("set")
    sets = _settings("the recipe's set", {} if given is None else given)
    if "defaults" not in profile:
        return _frozen(pid, str(launched), image, profile, sets, recipe)
    return _template(pid, str(launched), image, profile, sets, recipe)


def _program(pid: str, launched: str, profile: dict[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    if launched == "host":
        command = profile.get("command")
        if isinstance(command, str):
            try:
                argv = tuple(shlex.split(command))
            except ValueError:
                raise CannotRender(f"profile {pid}'s command does not split into words (unbalanced quotes)") from None
        else:
            argv = _strings(f"profile {pid}'s command", command)
        if not argv:
            raise CannotRender(f"profile {pid} (host) states no command to run")
        return argv[0], argv[1:]
    args = _strings(f"profile {pid}'s args", profile.get("args"))
    if launched == "native":
        if not args:
            raise CannotRender(f"profile {pid} (native) states no args to run")
        return args[0], args[1:]
    entry = profile.get("entrypoint")
    if entry is not None and not isinstance(entry, str):
        raise CannotRender(f"profile {pid}'s entrypoint is {_kind_of(entry)}, not a program")
    return entry or None, args


def _frozen(pid: str, launched: str, image: str | None, profile: dict[str, Any], sets: dict[str, Scalar],
            recipe: Mapping[str, Any]) -> LabLaunch:
    """A frozen profile: the launch as validated; the recipe can set nothing (the profile has no settings)."""
    program, args = _program(pid, launched, profile)
    if "ctx" not in profile:
        raise CannotRender(f"frozen profile {pid} states no ctx")
    cfg = profile.get("config")
    at = text = None
    if cfg is not None:
        if not isinstance(cfg, dict) or not isinstance(cfg.get("text"), str):
            raise CannotRender(f"frozen profile {pid}'s config is {_kind_of(cfg)}, not a file's text and place")
        if len(cfg["text"]) > MAX_CONFIG_CHARS:
            raise CannotRender(f"frozen profile {pid}'s config is past {MAX_CONFIG_CHARS:,} characters")
        text = cfg["text"]
        at = cfg.get("at") if isinstance(cfg.get("at"), str) else None
    weights = recipe.get("weights")
    return LabLaunch(pid, "frozen", launched, image, program, args,
                     ctx=_whole(f"frozen profile {pid}'s ctx", profile.get("ctx")),
                     seqs=_whole(f"frozen profile {pid}'s seqs", profile.get("seqs"), 1),
                     vision=_truth(f"frozen profile {pid}'s vision", profile.get("vision")),
                     config_at=at, config_text=text, weights=weights if isinstance(weights, str) else None,
                     set_keys=tuple(sets))


def _template(pid: str, launched: str, image: str | None, profile: dict[str, Any], sets: dict[str, Scalar],
              recipe: Mapping[str, Any]) -> LabLaunch:
    """A template profile: settings = defaults + set; the config lines and weights_at filled from them."""
    defaults = _settings(f"profile {pid}'s defaults", profile.get("defaults"))
    unknown = sorted(k for k in sets if k not in defaults)
    if unknown:  # lab.py try: "<k> is not a setting of <profile>: <its defaults>"
        raise CannotRender(f"the recipe sets {_listed(unknown)}, which is not a setting of {pid} (its settings: "
                           f"{_listed(sorted(defaults)) or 'none'})")
    program, args = _program(pid, launched, profile)
    s = {**defaults, **sets}
    if "ctx" not in s:
        raise CannotRender(f"profile {pid}'s defaults state no ctx, and the recipe sets none")
    ctx = _whole(f"setting ctx of {pid}", s["ctx"])
    seqs = _whole(f"setting seqs of {pid}", s.get("seqs"), 1)
    vision = _truth(f"setting vision of {pid}", s.get("vision"))
    weights = recipe.get("weights")
    pinned = _PINNED.fullmatch(weights) if isinstance(weights, str) else None
    values: dict[str, object] = {k: _word(v) for k, v in s.items()}
    origin = {"name": f"which comes from the recipe's weights as <repo>@<40-hex revision> (they are "
                      f"{_named(weights)})",
              "draft_block": "which comes from setting draft, which neither its defaults nor the recipe sets"}
    if pinned:
        values["name"] = f"{pinned.group(2)}-{pinned.group(3)[:8]}"
    values["cache_tokens"] = str(ctx * seqs + 1024 * seqs)
    if "draft" in s:
        values["draft_block"] = "{draft_mode: mtp}" if s["draft"] == "mtp" else "{}"
    longest = max((len(str(v)) for v in values.values()), default=0)
    lines = profile.get("config")
    text = None
    if lines is not None:
        rendered, used = [], 0
        for i, line in enumerate(_strings(f"profile {pid}'s config", lines)):
            out = _fill(pid, "config", line, values, longest, MAX_CONFIG_CHARS - used, origin, i + 1)
            used += len(out) + 1
            rendered.append(out)
        text = "\n".join(rendered) + "\n"
    at_given = profile.get("weights_at")
    weights_at = None
    if at_given is not None:
        if not isinstance(at_given, str):
            raise CannotRender(f"profile {pid}'s weights_at is {_kind_of(at_given)}, not a path")
        # the lab fills weights_at from name alone
        only_name = {"name": values["name"]} if "name" in values else {}
        weights_at = _fill(pid, "weights_at", at_given, only_name, longest, MAX_CONFIG_CHARS,
                           {**origin, **{k: "which weights_at does not take (the lab fills it from name alone)"
                                         for k in values if k != "name"}})
    config_at = profile.get("config_at")
    return LabLaunch(pid, "template", launched, image, program, args, ctx=ctx, seqs=seqs, vision=vision,
                     settings=s, set_keys=tuple(k for k in s if k in sets), defaults=defaults,
                     config_at=config_at if isinstance(config_at, str) else None, config_text=text,
                     weights=weights if isinstance(weights, str) else None, weights_at=weights_at)
