"""The search space of `servepack tune`: llama-server flags → candidate values, and the constraints between them.

A space comes from a TOML file (`--space FILE`, a `[tune]` table) or from defaults for the detected host. Each
flag lists its candidates, or a range `{ min, max, step }` (`step` an integer, or "x2" for doubling). Constraints
between flags are built in (ubatch ≤ batch; a quantised V cache needs flash attention): a configuration that
breaks one is never launched; `repair` moves it to the nearest one that holds.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, ValidationError

from servepack.errors import UsageError
from servepack.packs.flag_policy import allowed_now, argv_flags, refused, secret_flag_problem
from servepack.packs.loader import parse_toml
from servepack.packs.schema import RESERVED_FLAGS, FlagValue, Preset
from servepack.safepath import read_bounded
from servepack.strict import Strict

MAX_SPACE_BYTES = 1 << 16
MAX_VALUES = 64
MAX_GRID = 100_000
# llama-server's short names → the long names a space and a trial preset use.
ALIASES = {"t": "threads", "tb": "threads-batch", "b": "batch-size", "ub": "ubatch-size", "fa": "flash-attn",
           "ngl": "n-gpu-layers", "gpu-layers": "n-gpu-layers", "ctk": "cache-type-k", "ctv": "cache-type-v",
           "np": "parallel", "ot": "override-tensor", "c": "ctx-size"}
# What llama-server uses when a flag is not given (for constraints against the base preset).
LLAMA_DEFAULTS: dict[str, FlagValue] = {"batch-size": 2048, "ubatch-size": 512, "flash-attn": "auto",
                                        "cache-type-v": "f16"}
Config = dict[str, FlagValue]


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def config_key(config: Mapping[str, FlagValue]) -> str:
    """A stable text key for a configuration (flag order does not matter)."""
    return " ".join(f"{k}={_text(config[k])}" for k in sorted(config))


def _text(value: FlagValue) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _int(value: FlagValue) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def fa_on(value: FlagValue | None) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("on", "1", "true", "enabled"))


def merged_flags(base: Mapping[str, FlagValue], config: Mapping[str, FlagValue]) -> Config:
    """The base preset's flags with the trial's values; an alias in the base is replaced by the long name."""
    out = {k: v for k, v in base.items() if canonical(k) not in config}
    out.update(config)
    return out


def constraint_problem(flags: Mapping[str, FlagValue]) -> str | None:
    """Why a full flag set breaks a constraint between flags, or None."""
    get = {canonical(k): v for k, v in flags.items()}
    batch = _int(get.get("batch-size", LLAMA_DEFAULTS["batch-size"]))
    ubatch = _int(get.get("ubatch-size", LLAMA_DEFAULTS["ubatch-size"]))
    if batch is not None and ubatch is not None and ubatch > batch:
        return f"ubatch-size {ubatch} > batch-size {batch}"
    ctv = str(get.get("cache-type-v", "f16")).lower()
    if ctv not in ("f16", "f32", "bf16") and not fa_on(get.get("flash-attn", LLAMA_DEFAULTS["flash-attn"])):
        return f"cache-type-v {ctv} needs flash-attn on"
    return None


class SearchSpace(Strict):
    """Flags (long names) → candidate values, in the order given; `source` says where it came from."""

    model_config = ConfigDict(frozen=True)

    params: dict[str, tuple[FlagValue, ...]]
    source: str

    @property
    def names(self) -> list[str]:
        return list(self.params)

    def size(self) -> int:
        n = 1
        for values in self.params.values():
            n *= len(values)
        return n

    def configs(self) -> Iterator[Config]:
        for combo in itertools.product(*self.params.values()):
            yield dict(zip(self.params, combo, strict=True))

    def grid(self, base: Mapping[str, FlagValue]) -> list[Config]:
        """Every configuration whose flags, on top of the base preset's, hold every constraint."""
        return [c for c in self.configs() if constraint_problem(merged_flags(base, c)) is None]

    def repair(self, config: Config, base: Mapping[str, FlagValue]) -> Config | None:
        """The nearest configuration that holds the constraints (ubatch lowered, flash attention on), or None."""
        out = dict(config)
        flags = merged_flags(base, out)
        batch = _int(flags.get("batch-size", LLAMA_DEFAULTS["batch-size"]))
        if "ubatch-size" in out and batch is not None:
            fits = [v for v in self.params["ubatch-size"] if (_int(v) or 0) <= batch]
            ub = _int(out["ubatch-size"])
            if ub is not None and ub > batch:
                if not fits:
                    return None
                out["ubatch-size"] = max(fits, key=lambda v: _int(v) or 0)
        if constraint_problem(merged_flags(base, out)) and "flash-attn" in out:
            on = [v for v in self.params["flash-attn"] if fa_on(v)]
            if on:
                out["flash-attn"] = on[0]
        return out if constraint_problem(merged_flags(base, out)) is None else None


def _expand_range(name: str, spec: Mapping[str, Any]) -> list[FlagValue]:
    extra = set(spec) - {"min", "max", "step"}
    if extra or not {"min", "max"} <= set(spec):
        raise UsageError(f"space: {name}: a range is {{ min = A, max = B, step = S }} (got keys {sorted(spec)})")
    lo, hi, step = spec["min"], spec["max"], spec.get("step", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)) or lo > hi:
        raise UsageError(f"space: {name}: min and max must be integers with min ≤ max")
    values: list[FlagValue] = []
    if step == "x2":
        if lo < 1:
            raise UsageError(f"space: {name}: a doubling range needs min ≥ 1")
        v = lo
        while v <= hi and len(values) <= MAX_VALUES:
            values.append(v)
            v *= 2
    elif isinstance(step, int) and not isinstance(step, bool) and step >= 1:
        count = (hi - lo) // step + 1  # counted before anything is expanded: max = 2**63 is one division
        if count > MAX_VALUES:
            raise UsageError(f"space: {name}: the range {lo}..{hi} step {step} holds {count:,} values, more than "
                             f"{MAX_VALUES}; narrow the range or raise the step")
        values = list(range(lo, hi + 1, step))
    else:
        raise UsageError(f"space: {name}: step must be a positive integer or \"x2\"")
    return values


def _values(name: str, raw: Any) -> tuple[FlagValue, ...]:
    if isinstance(raw, dict):
        values = _expand_range(name, raw)
    elif isinstance(raw, list):
        values = raw
    else:
        values = [raw]
    if not values:
        raise UsageError(f"space: {name}: no candidate values")
    if len(values) > MAX_VALUES:
        raise UsageError(f"space: {name}: more than {MAX_VALUES} candidates; narrow the range")
    for v in values:
        if not isinstance(v, str | int | float | bool):
            raise UsageError(f"space: {name}: candidate {v!r} is not a string, number or boolean")
    if len({(type(v), v) for v in values}) != len(values):
        raise UsageError(f"space: {name}: a candidate is listed twice")
    return tuple(values)


def build_space(table: Mapping[str, Any], source: str, allowed: Collection[str] | None = None) -> SearchSpace:
    """Validate a `[tune]` table: known flag names, each candidate a value a preset accepts, a bounded grid.

    A secret-bearing flag is refused (it would be written into tune.json and every trial), and so is a flag that
    reaches this host (`packs.flag_policy`) unless its family is in `allowed` (default: the command's
    `--allow-server-flag`)."""
    allowed = allowed_now() if allowed is None else allowed
    if not isinstance(table, Mapping) or not table:
        raise UsageError(f"space ({source}): needs a [tune] table with at least one flag")
    params: dict[str, tuple[FlagValue, ...]] = {}
    for raw_name, raw in table.items():
        if not isinstance(raw_name, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", raw_name):
            raise UsageError(f"space ({source}): flag {raw_name!r}: use llama-server's flag name without dashes")
        name = canonical(raw_name)
        if name in RESERVED_FLAGS:
            raise UsageError(f"space ({source}): flag {name!r} is set by servepack itself; it cannot be tuned")
        if (secret := secret_flag_problem(name, f"space ({source})")) is not None:
            raise UsageError(secret)
        tokens = [raw_name, name, *argv_flags(v for v in raw if isinstance(v, str))] if isinstance(raw, list) else \
            [raw_name, name, *argv_flags([raw] if isinstance(raw, str) else [])]
        if (problem := refused("llama.cpp", tokens, allowed, f"space ({source})")) is not None:
            raise UsageError(problem)
        if name in params:
            raise UsageError(f"space ({source}): flag {name!r} is given twice (once by a short name)")
        values = _values(name, raw)
        for v in values:
            try:
                Preset(flags={name: v})
            except ValidationError as exc:
                raise UsageError(f"space ({source}): {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
        params[name] = values
    space = SearchSpace(params=params, source=source)
    if space.size() > MAX_GRID:
        raise UsageError(f"space ({source}): {space.size():,} combinations (more than {MAX_GRID:,}); narrow it")
    return space


def load_space(path: Path) -> SearchSpace:
    """A space from a TOML file with a `[tune]` table (other tables are refused, so a typo is not ignored)."""
    raw = read_bounded(path, MAX_SPACE_BYTES, "a space is a short TOML file with a [tune] table",
                       label=f"--space {path}")
    doc = parse_toml(raw, f"--space {path}", "a space")
    if set(doc) != {"tune"}:
        raise UsageError(f"--space {path}: expected exactly one [tune] table, found {sorted(doc) or 'none'}")
    return build_space(doc["tune"], str(path))


def default_space(cores: int, gpus: int) -> SearchSpace:
    """Defaults for a host: threads around its core count, batch × ubatch, flash attention; GPU offload if any."""
    threads = sorted({max(1, cores // 2), cores, *([cores + cores // 2] if cores >= 4 else [])})
    table: dict[str, Any] = {
        "threads": threads, "batch-size": [512, 1024, 2048], "ubatch-size": [128, 256, 512],
        "flash-attn": ["on", "off"],
    }
    if gpus:
        table["n-gpu-layers"] = [-1, 0]
    return build_space(table, f"defaults for {cores} cores" + (f", {gpus} GPU(s)" if gpus else ""))
