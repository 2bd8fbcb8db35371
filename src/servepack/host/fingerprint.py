"""What this machine is: CPU, RAM, OS, GPUs via NVML; and which hardware id it may carry."""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

import psutil
from pydantic import Field

from servepack.host import nvml
from servepack.packs.schema import HardwareTarget
from servepack.strict import Strict

GIB = 1024**3


class GpuFacts(Strict):
    index: int
    name: str
    uuid: str | None
    memory_total_bytes: int | None = Field(description="None where NVML reports none (unified memory, GB10)")
    memory_note: str | None = None


class HostFingerprint(Strict):
    hostname: str
    cpu_model: str
    cpu_arch: str
    cpu_cores_logical: int
    cpu_cores_physical: int | None
    ram_total_bytes: int
    os: str
    kernel: str
    python: str
    gpus: list[GpuFacts]
    gpu_driver: str | None
    cuda_driver_version: str | None
    nvml: str = Field(description="'ok', or why NVML could not be read")

    @property
    def ram_gib(self) -> float:
        return self.ram_total_bytes / GIB

    def label(self) -> str:
        gpu = f" · {len(self.gpus)}× {self.gpus[0].name}" if self.gpus else " · no GPU"
        return f"{self.cpu_model} ({self.cpu_cores_logical} cores, {self.ram_gib:.0f} GiB){gpu}"


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    for key in ("model name", "Model", "Hardware", "cpu model"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if m:
            return m.group(1).strip()
    return platform.processor() or platform.machine()


def _os_name() -> str:
    try:
        text = Path("/etc/os-release").read_text()
        m = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', text, re.MULTILINE)
        if m:
            return m.group(1)
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}"


def nvml_gpus() -> tuple[list[GpuFacts], str | None, str | None, str]:
    """GPUs, driver and CUDA driver version via NVML; ([], None, None, reason) without one."""
    nv = nvml.nvml()
    if isinstance(nv, nvml.Unreadable):
        return [], None, None, nv.reason
    count = nv.count()
    if isinstance(count, nvml.Unreadable):
        return [], None, None, count.reason
    driver, cuda = nv.driver_version(), nv.cuda_driver_version()
    gpus = []
    for i in range(count):
        mem = nv.memory(i)
        name, uuid = nv.name(i), nv.uuid(i)
        gpus.append(GpuFacts(
            index=i, name=f"unknown ({name.reason})" if isinstance(name, nvml.Unreadable) else name,
            uuid=None if isinstance(uuid, nvml.Unreadable) else uuid,
            memory_total_bytes=None if isinstance(mem, nvml.Unreadable) else mem.total_bytes,
            memory_note=f"NVML reports no framebuffer memory ({mem.reason}); unified memory?"
            if isinstance(mem, nvml.Unreadable) else None))
    return (gpus, None if isinstance(driver, nvml.Unreadable) else driver,
            None if isinstance(cuda, nvml.Unreadable) else cuda, "ok")


def fingerprint() -> HostFingerprint:
    gpus, driver, cuda, nvml = nvml_gpus()
    return HostFingerprint(
        hostname=platform.node(),
        cpu_model=_cpu_model(),
        cpu_arch=platform.machine(),
        cpu_cores_logical=os.cpu_count() or 1,
        cpu_cores_physical=psutil.cpu_count(logical=False),
        ram_total_bytes=psutil.virtual_memory().total,
        os=_os_name(),
        kernel=platform.release(),
        python=sys.version.split()[0],
        gpus=gpus,
        gpu_driver=driver,
        cuda_driver_version=cuda,
        nvml=nvml,
    )


def _slug(text: str) -> str:
    text = re.sub(r"\(r\)|\(tm\)|cpu|processor|@.*$", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


KNOWN_GPUS = {  # NVML name pattern → registry-style hardware id stem
    r"GB10$": "dgx-spark-gb10-128gb",
    r"H200": "nvidia-h200",
    r"H100": "nvidia-h100",
    r"A100": "nvidia-a100",
    r"RTX 4090": "nvidia-rtx-4090-24gb",
    r"RTX 3060": "nvidia-rtx-3060-12gb",
}


# Published peak memory bandwidth (GB/s) by NVML name pattern, for the decode roofline of GPU-offloaded runs.
GPU_BANDWIDTH_GBS = {
    r"GB10$": 273.0,
    r"H200": 4800.0,
    r"H100.*(SXM|HBM3)": 3350.0,
    r"H100.*PCIe": 2000.0,
    r"A100.*80GB": 2039.0,
    r"RTX 4090": 1008.0,
    r"RTX 3060": 360.0,
}


def gpu_bandwidth_gbs(name: str) -> float | None:
    """The published memory bandwidth of a known GPU, else None."""
    return next((bw for pat, bw in GPU_BANDWIDTH_GBS.items() if re.search(pat, name)), None)


def detected_hardware_id(fp: HostFingerprint) -> str:
    """A hardware id for what was detected, never taken from a pack."""
    if fp.gpus:
        name = fp.gpus[0].name
        stem = next((hid for pat, hid in KNOWN_GPUS.items() if re.search(pat, name)), None)
        if stem is None:
            stem = _slug(name)
        if stem.startswith("dgx-") or stem.endswith("gb"):
            return stem
        total = fp.gpus[0].memory_total_bytes
        return f"{stem}-{round(total / GIB)}gb" if total else stem
    return f"cpu-{_slug(fp.cpu_model) or fp.cpu_arch}-{fp.cpu_cores_logical}c-{round(fp.ram_gib)}gb"


def match_target(fp: HostFingerprint, target: HardwareTarget) -> tuple[bool, list[str]]:
    """Whether the host satisfies the target's match rules, and every rule it fails."""
    rules = target.match
    failed = []
    if rules.gpu_name:
        names = [g.name for g in fp.gpus]
        if not any(re.search(rules.gpu_name, n) for n in names):
            failed.append(f"GPU name /{rules.gpu_name}/ not matched (detected: {', '.join(names) or 'no GPU'})")
    if rules.memory_gb:
        lo, hi = rules.memory_gb
        if not lo <= fp.ram_gib <= hi:
            failed.append(f"RAM {fp.ram_gib:.0f} GiB outside {lo:g}–{hi:g} GiB")
    if rules.cpu_arch and fp.cpu_arch not in rules.cpu_arch:
        failed.append(f"CPU arch {fp.cpu_arch} not in {rules.cpu_arch}")
    return not failed, failed
