"""A host where nothing but servepack runs, for contention watches in tests that do not test contention."""

from __future__ import annotations

import time

from servepack.host.contention import CLK_TCK, CpuTimes, ProcTick


class QuietHost:
    """Every tick: the host busy with nothing but this process, no steal, no other process."""

    def __init__(self, *_: object, **__: object) -> None:
        pass

    def cores(self) -> int:
        return 2

    def cpu_times(self) -> CpuTimes | None:
        return CpuTimes(busy=0, steal=0, total=int(time.time() * CLK_TCK) * 2)

    def processes(self) -> dict[int, ProcTick]:
        return {}

    def loadavg(self) -> float | None:
        return 0.05

    def cpu_mhz(self) -> float | None:
        return None

    def throttle_count(self) -> int | None:
        return None

    def gpu_others_pct(self, exclude: set[int]) -> float | None:
        return None

    def unavailable(self) -> list[str]:
        return []

    def close(self) -> None:
        pass
