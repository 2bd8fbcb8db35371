"""The hardware a run's numbers carry: the registry catalog's id where one matches (the pack's target, or the
GPU by name and memory), else a CPU box's card or the detected id, and a hardware record for a host the
catalog lacks."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from typing import Any

from servepack.host.fingerprint import gpu_bandwidth_gbs
from servepack.records.claims import RunView
from servepack.registry.cards import ARCH, cpu_card_for_export, this_cpu
from servepack.registry.export.fields import GIB, fact, slug
from servepack.registry.format.check import (
    REGISTRY_SCHEMA_VERSION,
    Catalog,
    catalog,
)


@dataclass(frozen=True)
class HardwareChoice:
    """The registry hardware id a run's numbers carry, how it was chosen, and whether the catalog holds it."""

    id: str
    how: str
    in_catalog: bool
    not_submittable: str | None = None  # a CPU box's card the registry's lab does not publish, and why


def _gpu_candidates(name: str, gib: int, cat: Catalog) -> list[str]:
    words = slug(name).split("-")
    out = []
    for keep in ((), ("radeon",)):
        drop = set(cat.gpu_name_drop) - set(keep)
        stem = "-".join(w for w in words if w not in drop)
        out.append(f"{stem}-{gib}gb")
    return out


_SIZE = re.compile(r"-(\d+)gb(?:-|$)")


def card_memory_problem(hid: str, memory_bytes: int | None) -> str | None:
    """Why a GPU of `memory_bytes` is not the card `hid` by memory (its `-<n>gb` size within a tenth, at least
    1 GB), or None when it agrees, the card states no size, or the GPU reports no memory of its own (unified)."""
    m = _SIZE.search(hid)
    if m is None or not memory_bytes:
        return None
    size, gib = int(m.group(1)), memory_bytes / GIB
    if abs(gib - size) <= max(1.0, size / 10):
        return None
    return f"card {hid} has {size} GB and this GPU {gib:.0f} GiB"


def catalog_gpu_id(name: str, memory_bytes: int | None, cat: Catalog | None = None) -> tuple[str, str] | None:
    """The catalog id of a GPU as NVML names it and its memory agrees with (the id's size suffix), with why; None
    if none (a name the catalog's rules match on a GPU of another size is not that card)."""
    cat = cat or catalog()
    for pattern, hid in cat.gpu_names:
        if re.search(pattern, name) and hid in cat.hardware_ids and card_memory_problem(hid, memory_bytes) is None:
            said = f" with {memory_bytes / GIB:.0f} GiB" if memory_bytes else " (no memory of its own reported)"
            return hid, f"GPU {name!r}{said} matches the catalog's {hid}"
    if memory_bytes:
        for hid in _gpu_candidates(name, round(memory_bytes / GIB), cat):
            if hid in cat.hardware_ids:
                return hid, f"GPU {name!r} with {memory_bytes / GIB:.0f} GiB is the catalog's {hid}"
    return None


def registry_hardware(view: RunView, cat: Catalog | None = None) -> HardwareChoice:
    """Map what the run detected to the registry's catalog id where one matches, else servepack's detected id."""
    cat = cat or catalog()
    hw, host = view.receipt.hardware, view.receipt.host
    size = card_memory_problem(hw.target_id, host.gpus[0].memory_total_bytes) if host.gpus else None
    if hw.target_match and hw.target_id in cat.hardware_ids and size is None:
        return HardwareChoice(hw.target_id, f"the pack's target {hw.target_id}, whose match rules this host met", True)
    # a card the pack's rules matched but whose memory is not this GPU's is not that card (issue 33)
    passed = f"the pack's target is not this GPU ({size}); " if hw.target_match and size else ""
    if host.gpus and (found := catalog_gpu_id(host.gpus[0].name, host.gpus[0].memory_total_bytes, cat)):
        return HardwareChoice(found[0], passed + found[1], True)
    if not host.gpus:
        # the receipt records no ISA extension: this host's, where the run is exported on the machine that ran it
        arch, isa = this_cpu()
        same = host.hostname == platform.node() and ARCH.get(host.cpu_arch.lower()) == arch
        card, problem = cpu_card_for_export(ARCH.get(host.cpu_arch.lower(), slug(host.cpu_arch)),
                                            isa if same else None, isa_known=same)
        isa_said = f"this machine's {isa or 'no AVX2'} (the run's host)" if same else "not known (another machine)"
        return HardwareChoice(card, f"a CPU box ({hw.label}): the registry's lab names CPU machines by card "
                              f"(<arch>[-<isa>]-cpu); its instruction set {isa_said}, so {card}", False, problem)
    hid = slug(hw.detected_id)
    return HardwareChoice(hid, f"{passed}nothing in the registry's catalog matches {hw.label} (GPU model and "
                          f"memory); this export brings hardware/{hid}.json", False)


def _cpu_vendor(cpu_model: str) -> str | None:
    text = cpu_model.lower()
    return next((v for k, v in (("amd", "amd"), ("intel", "intel"), ("apple", "apple")) if k in text), None)


def hardware_record(view: RunView, hid: str, prov: dict[str, Any], src: dict[str, Any]
                     ) -> tuple[dict[str, Any], list[str]]:
    """The registry's hardware record for a host its catalog lacks, and the fields it cannot fill truthfully."""
    host = view.receipt.host
    gaps: list[str] = []
    facts: dict[str, Any] = {"memory.vram_type": fact("unknown", prov, "not-reported-by-nvml")}
    if host.gpus:
        gpu = host.gpus[0]
        vram = round((gpu.memory_total_bytes or host.ram_total_bytes) / GIB, 1)
        bandwidth = gpu_bandwidth_gbs(gpu.name)
        unified = gpu.memory_total_bytes is None
        rec: dict[str, Any] = {
            "vendor": "nvidia", "name": gpu.name, "kind": "unified" if unified else "discrete",
            "accelerator_backend": "nvidia", "aliases": [gpu.name.lower()],
            "memory": {"vram_gb": vram, "vram_type": None, "bandwidth_gb_per_s": bandwidth,
                       "cpu_memory_gb": round(host.ram_gib, 1)},
        }
        facts["memory.vram_gb"] = fact("known", prov, note="NVML total memory of GPU 0" if not unified else
                                       "NVML reports no framebuffer; system RAM, shared with the GPU")
        if bandwidth is None:
            facts["memory.bandwidth_gb_per_s"] = fact("unknown", prov, "no-published-bandwidth-known-to-servepack")
    else:
        vendor = _cpu_vendor(host.cpu_model)
        # The registry describes accelerators; a CPU-only host has no backend, kind or (maybe) vendor in its enums.
        rec = {"vendor": vendor, "name": host.cpu_model, "kind": "cpu", "accelerator_backend": "cpu",
               "aliases": [host.cpu_model.lower()],
               "memory": {"vram_gb": round(host.ram_gib, 1), "vram_type": None, "bandwidth_gb_per_s": None,
                          "cpu_memory_gb": round(host.ram_gib, 1)}}
        gaps += ["kind", "accelerator_backend"] + (["vendor"] if vendor is None else [])
        facts["memory.vram_gb"] = fact("known", prov, note="CPU-only host: the model is served from system RAM")
        facts["memory.bandwidth_gb_per_s"] = fact("unknown", prov, "cpu-memory-bandwidth-not-measured")
    rec.update({"schema_version": REGISTRY_SCHEMA_VERSION, "id": hid, "products": [],
                "sources": [{"kind": src["kind"], "url": src["url"]}], "provenance": prov, "facts": facts})
    return rec, gaps
