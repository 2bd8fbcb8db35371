"""The one NVML wrapper: loaded once per process; every reading is a value or `Unreadable` with the reason.

Nothing here raises into the caller and nothing is guessed: a missing library, a driver that is not loaded, a call
this GPU does not support, a GPU lost mid-run all come back as `Unreadable("… because …")`. Callers test with
`isinstance(x, Unreadable)`.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Unreadable:
    """A reading that could not be taken, and why (one line, fit for a receipt)."""

    reason: str


@dataclass(frozen=True)
class Utilisation:
    """NVML's utilisation rates over its last sample period (about 1/6 s to 1 s, by GPU)."""

    gpu_pct: float  # % of the period in which a kernel ran on the GPU (the SM figure nvidia-smi shows)
    memory_pct: float  # % of the period in which device memory was being read or written


@dataclass(frozen=True)
class Memory:
    total_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    timestamp_us: int
    sm_pct: float


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and text != name else name


class Nvml:
    """An initialised NVML (never shut down: NVML is reference-counted and the process owns it once)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._handles: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # NVMLError_* (NotSupported, GpuIsLost, NoPermission, …) or a ctypes error
            return Unreadable(f"NVML {what} unreadable, because {_why(exc)}")

    def count(self) -> int | Unreadable:
        n = self._call("device count", self.lib.nvmlDeviceGetCount)
        return n if isinstance(n, Unreadable) else int(n)

    def _handle(self, i: int) -> Any:
        with self._lock:
            if i not in self._handles:
                h = self._call(f"GPU {i} handle", self.lib.nvmlDeviceGetHandleByIndex, i)
                if isinstance(h, Unreadable):
                    return h
                self._handles[i] = h
            return self._handles[i]

    def _device(self, i: int, what: str, fn_name: str, *args: Any) -> Any:
        h = self._handle(i)
        if isinstance(h, Unreadable):
            return h
        return self._call(f"GPU {i} {what}", getattr(self.lib, fn_name), h, *args)

    def driver_version(self) -> str | Unreadable:
        v = self._call("driver version", self.lib.nvmlSystemGetDriverVersion)
        return v if isinstance(v, Unreadable) else _decode(v)

    def cuda_driver_version(self) -> str | Unreadable:
        v = self._call("CUDA driver version", self.lib.nvmlSystemGetCudaDriverVersion_v2)
        return v if isinstance(v, Unreadable) else f"{int(v) // 1000}.{int(v) % 1000 // 10}"

    def name(self, i: int) -> str | Unreadable:
        v = self._device(i, "name", "nvmlDeviceGetName")
        return v if isinstance(v, Unreadable) else _decode(v)

    def uuid(self, i: int) -> str | Unreadable:
        v = self._device(i, "UUID", "nvmlDeviceGetUUID")
        return v if isinstance(v, Unreadable) else _decode(v)

    def energy_mj(self, i: int) -> int | Unreadable:
        """Total energy the GPU has used since the driver loaded (millijoules; Volta and later)."""
        v = self._device(i, "total energy counter", "nvmlDeviceGetTotalEnergyConsumption")
        return v if isinstance(v, Unreadable) else int(v)

    def utilisation(self, i: int) -> Utilisation | Unreadable:
        v = self._device(i, "utilisation", "nvmlDeviceGetUtilizationRates")
        return v if isinstance(v, Unreadable) else Utilisation(gpu_pct=float(v.gpu), memory_pct=float(v.memory))

    def memory(self, i: int) -> Memory | Unreadable:
        v = self._device(i, "memory", "nvmlDeviceGetMemoryInfo")
        return v if isinstance(v, Unreadable) else Memory(total_bytes=int(v.total), used_bytes=int(v.used))

    def process_utilisation(self, i: int, since_us: int) -> list[ProcessSample] | Unreadable:
        """Per-process SM samples newer than `since_us`; [] when no process was sampled since (NVML's NotFound)."""
        h = self._handle(i)
        if isinstance(h, Unreadable):
            return h
        try:
            samples = self.lib.nvmlDeviceGetProcessUtilization(h, since_us)
        except Exception as exc:
            if isinstance(exc, getattr(self.lib, "NVMLError_NotFound", ())):
                return []
            return Unreadable(f"NVML GPU {i} per-process utilisation unreadable, because {_why(exc)}")
        return [ProcessSample(pid=int(s.pid), timestamp_us=int(s.timeStamp), sm_pct=float(s.smUtil))
                for s in samples]


def _decode(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


_lock = threading.Lock()
_loaded: tuple[ModuleType | None, Nvml | Unreadable] | None = None


def _import() -> ModuleType | Unreadable:
    try:
        return importlib.import_module("pynvml")
    except ImportError:  # sys.modules["pynvml"] = None also lands here
        return Unreadable("NVML unreadable, because nvidia-ml-py is not installed")


def nvml() -> Nvml | Unreadable:
    """NVML initialised once for this process, or why it cannot be (no library, no driver, no GPU support)."""
    global _loaded
    lib = _import()
    mod = None if isinstance(lib, Unreadable) else lib
    with _lock:
        if _loaded is not None and _loaded[0] is mod:  # a test that swaps pynvml gets a fresh load
            return _loaded[1]
        got: Nvml | Unreadable
        if isinstance(lib, Unreadable):
            got = lib
        else:
            try:
                lib.nvmlInit()
                got = Nvml(lib)
            except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, …
                got = Unreadable(f"NVML unreadable, because {_why(exc)}")
        _loaded = (mod, got)
        return got


def device_count() -> int | Unreadable:
    nv = nvml()
    return nv if isinstance(nv, Unreadable) else nv.count()


def energy_mj(i: int) -> int | Unreadable:
    nv = nvml()
    return nv if isinstance(nv, Unreadable) else nv.energy_mj(i)


def utilisation(i: int) -> Utilisation | Unreadable:
    nv = nvml()
    return nv if isinstance(nv, Unreadable) else nv.utilisation(i)


def memory(i: int) -> Memory | Unreadable:
    nv = nvml()
    return nv if isinstance(nv, Unreadable) else nv.memory(i)
