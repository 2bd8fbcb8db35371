"""A stand-in for pynvml's module surface that host.nvml calls (tests only)."""

from __future__ import annotations

from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


class NVMLError_GpuIsLost(NVMLError):
    def __str__(self) -> str:
        return "GPU is lost"


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    def __str__(self) -> str:
        return "Driver Not Loaded"


class FakePynvml:
    """pynvml's surface host.nvml calls; `energy` is the per-GPU counter, `lost` GPUs raise GpuIsLost."""

    NVMLError_NotFound = NVMLError_NotFound

    def __init__(self, gpus: int = 2, init_error: Exception | None = None) -> None:
        self.gpus, self.init_error, self.inits = gpus, init_error, 0
        self.energy = {i: 1_000_000 * (i + 1) for i in range(gpus)}
        self.lost: set[int] = set()
        self.no_energy: set[int] = set()

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error:
            raise self.init_error

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def _live(self, h: int) -> int:
        if h in self.lost:
            raise NVMLError_GpuIsLost()
        return h

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if self._live(h) in self.no_energy:
            raise NVMLError_NotSupported()
        return self.energy[h]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=13 + self._live(h), memory=41)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=141 << 30, used=(7 + self._live(h)) << 30)

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{self._live(h)}"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.1"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12080

    def nvmlDeviceGetProcessUtilization(self, h: int, since: int) -> list[SimpleNamespace]:
        if since >= 50:
            raise NVMLError_NotFound()
        return [SimpleNamespace(pid=7, timeStamp=50, smUtil=88)]
