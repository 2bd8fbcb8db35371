"""Which of the registry's hardware cards a host is: a CPU box by its architecture and instruction set, a GPU by its
model and memory.

The registry's lab names a CPU machine by card `<arch>[-<isa>]-cpu` (`x86-64-avx2-cpu`): a recipe on such a card
needs that architecture and at least that instruction-set extension (an AVX-512 host runs an AVX2 build; an AVX2
host does not run an AVX-512 one). A GPU card is the catalog id its name and memory map to
(`registry.export.hardware.catalog_gpu_id`, handed in as (id, why) pairs). `host_cards` lists the cards a host is,
most specific first; `card_match` says whether a record's hardware id is one of them, and why, in words;
`cpu_card_for_export` the published card a CPU box's run is exported under, or why it cannot be submitted.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Sequence
from pathlib import Path

ISA_ORDER = (None, "avx2", "avx512")  # x86-64 extensions a llama.cpp CPU build is made for, weakest first
ARCH = {"x86_64": "x86-64", "amd64": "x86-64", "x86-64": "x86-64", "aarch64": "aarch64", "arm64": "aarch64"}
_CPU_CARD = re.compile(r"(x86-64|aarch64|arm64)(?:-(avx2|avx512|avx-512))?-cpu")
MAX_CPUINFO = 1 << 22
# The CPU cards the registry's lab publishes (its lab runs name them: lab/runs/x86-64-avx2-cpu.*, at commit
# dc4efd9f774f71036aa39894236f5d79cd359f06); an export names one of these or says it cannot be submitted.
KNOWN_CPU_CARDS = ("x86-64-avx2-cpu",)


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags of the first processor in /proc/cpuinfo text (`flags` on x86, `Features` on arm)."""
    m = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    return frozenset(m.group(1).split()) if m else frozenset()


def isa_of(flags: frozenset[str]) -> str | None:
    """The strongest x86-64 extension a CPU build can use here: avx512 (avx512f), avx2, or None."""
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else None


def this_cpu() -> tuple[str, str | None]:
    """This host's architecture as the registry spells it (`x86-64`, `aarch64`) and its x86-64 extension."""
    arch = ARCH.get(platform.machine().lower(), platform.machine().lower())
    try:
        with Path("/proc/cpuinfo").open(encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_CPUINFO)
    except OSError:
        return arch, None
    return arch, isa_of(cpu_flags(text)) if arch == "x86-64" else None


def cpu_card_for_export(arch: str, isa: str | None, isa_known: bool = True) -> tuple[str, str | None]:
    """The lab card a CPU box's run is exported under, and why it cannot be submitted (None: it can): the most
    specific published card this CPU is, else `<arch>[-<isa>]-cpu` with the reason. `isa_known=False`: the run's
    x86-64 extensions are not known (exported on another machine)."""
    mine = host_cards(arch, isa, ())
    known = next((c for c in mine if c in KNOWN_CPU_CARDS), None)
    if known:
        return known, None
    card = mine[0] if mine else "cpu"
    if arch == "x86-64" and not isa_known:
        return card, (f"card {card}: the instruction set of the run's CPU is not known (exported on another machine "
                      f"than the one that ran it), and the registry's lab names CPU cards by it "
                      f"({', '.join(KNOWN_CPU_CARDS)})")
    return card, (f"card {card}: the registry's lab publishes no such card (its CPU cards: "
                  f"{', '.join(KNOWN_CPU_CARDS)}); lab.py card() would refuse the run")


def _fold(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def gpu_card_of(card: dict[str, object], gpu_name: str, gpu_bytes: int | None) -> tuple[str, str] | None:
    """(card id, why) when the lab card `card` (cards/<vendor>/<id>.json: name, names, vram_gb) is this GPU: one of
    its names inside the GPU's name as NVML gives it (`GeForce RTX 3090` in `NVIDIA GeForce RTX 3090`) and its
    memory within a tenth (at least 1 GB) of the GPU's; else None."""
    cid, vram = card.get("id"), card.get("vram_gb")
    more = card.get("names")
    names = [card.get("name"), *(more if isinstance(more, list) else [])]
    if not isinstance(cid, str) or not isinstance(vram, int | float) or isinstance(vram, bool) or not gpu_bytes:
        return None
    gib = gpu_bytes / (1 << 30)
    folded = f" {_fold(gpu_name)} "
    named = next((n for n in names if isinstance(n, str) and _fold(n) and f" {_fold(n)} " in folded), None)
    if named is None or abs(gib - vram) > max(1.0, vram / 10):
        return None
    return cid, f"GPU {gpu_name!r} with {gib:.0f} GiB is the lab's card {cid} ({named}, {vram:g} GB)"


def host_cards(arch: str, isa: str | None, gpu_cards: Sequence[tuple[str, str]] = ()) -> tuple[str, ...]:
    """The cards this host is, most specific first: each GPU's catalog id (`gpu_cards`: (id, why)), then its CPU
    cards (`x86-64-avx512-cpu`, `x86-64-avx2-cpu`, … down to `x86-64-cpu`)."""
    out = [hid for hid, _ in gpu_cards]
    if arch:
        have = ISA_ORDER.index(isa) if isa in ISA_ORDER else 0
        out += [f"{arch}-{x}-cpu" if x else f"{arch}-cpu" for x in reversed(ISA_ORDER[:have + 1])]
    return tuple(dict.fromkeys(out))


def card_match(hardware_id: str, arch: str, isa: str | None, gpu_cards: Sequence[tuple[str, str]] = ()
               ) -> str | None:
    """Why this host is the card `hardware_id` (one line), or None when it is not."""
    cpu = _CPU_CARD.fullmatch(hardware_id)
    if cpu:
        want_arch = ARCH.get(cpu.group(1), cpu.group(1))
        want = (cpu.group(2) or "").replace("-", "") or None
        if want_arch != arch:
            return None
        have = ISA_ORDER.index(isa) if isa in ISA_ORDER else 0
        if ISA_ORDER.index(want) > have:
            return None
        said = f"{isa.upper().replace('512', '-512')}" if isa else "no AVX2"
        return (f"a {arch} CPU with {said}" + (f", which runs an {want.upper().replace('512', '-512')} build"
                                               if want else "") + f": the registry's card {hardware_id}")
    return next((why for hid, why in gpu_cards if hid == hardware_id), None)
