"""Observer cost: the CPU time servepack itself spends measuring, beside the CPU time of the server it measures.

servepack's own: `time.process_time()` of this process (every thread: the client, the memory sampler, the
contention watch, and a fake server when a test runs one in a thread). The server's: utime + stime from
/proc/<pid>/stat of every process behind the endpoint on this host and their descendants, read at the start and
the end of the window (a process that exits in between is counted up to its last reading). When no server pid
is known (an attached server whose process is not visible), the server's time is unknown and so is the ratio.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servepack.engine.base import Endpoint
from servepack.host.contention import ProcReader, ProcTick, descendants


def local_pids(endpoint: Endpoint) -> list[int]:
    """The pids of the endpoint's processes on this host (a remote worker's pid means nothing here)."""
    local = {"127.0.0.1", "::1", "localhost", socket.gethostname()}
    return [p.pid for p in endpoint.processes if p.pid and p.host in local]


class GpuUse(BaseModel):
    """One device's utilisation over a point (NVML, mean of the samples taken during it)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    sm_pct: float | None = Field(description="share of time a kernel ran (NVML utilization.gpu), %")
    mem_bw_pct: float | None = Field(description="share of time device memory was read or written "
                                                 "(NVML utilization.memory), %")


class PointEvidence(BaseModel):
    """What the machine did during one point: the figures the limit verdict is taken from.

    A figure is None when its meter is absent or could not be read for this point; the matching `*_note` says
    which, so an absent meter is never read as an idle resource.
    """

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(description="seconds covered by the readings (the point, widened to the ticks around it)")
    samples: int = Field(description="readings taken during the point")
    gpu_state: Literal["measured", "absent", "unreadable"] = Field(
        "absent", description="absent: no GPU meter on this host; unreadable: one failed during the point")
    gpus: list[GpuUse] = Field(default_factory=list)
    gpu_sm_pct: float | None = Field(None, description="the busiest device's SM utilisation, %")
    gpu_mem_bw_pct: float | None = Field(None, description="the busiest device's memory-bandwidth utilisation, %")
    gpu_note: str | None = Field(None, description="why there are no GPU figures (absent or unreadable)")
    server_thread_pct: float | None = Field(None, description="the server's busiest thread, % of one core")
    server_thread: str | None = Field(None, description="that thread: 'name (pid P, tid T)'")
    server_threads: int | None = Field(None, description="threads of the server's process tree seen")
    server_cpu_cores: float | None = Field(None, description="the server's whole process tree, cores")
    server_note: str | None = None
    host_cpu_pct: float | None = Field(None, description="busy share of all logical cores (/proc/stat), %")
    host_steal_pct: float | None = Field(None, description="time the hypervisor stole (/proc/stat), %")
    host_cores: int | None = None
    host_note: str | None = None

    @property
    def server_other_cores(self) -> float | None:
        """Cores the server's other threads used together (its whole tree less the busiest thread)."""
        if self.server_cpu_cores is None or self.server_thread_pct is None:
            return None
        return max(self.server_cpu_cores - self.server_thread_pct / 100, 0.0)


class ObserverCost(BaseModel):
    """CPU-seconds spent by servepack and by the server over one window."""

    model_config = ConfigDict(extra="forbid")

    wall_s: float
    client_cpu_s: float = Field(description="servepack's own process, every thread (time.process_time)")
    server_cpu_s: float | None = Field(None, description="the endpoint's processes and their children (/proc)")
    server_pids: list[int] = Field(default_factory=list)
    ratio: float | None = Field(None, description="client ÷ server CPU-seconds; None when the server's is unknown")
    note: str | None = None

    @staticmethod
    def combine(costs: Iterable[ObserverCost]) -> ObserverCost:
        """The sum over windows (a whole sweep); the server's time is known only if every window knew it."""
        items = list(costs)
        client = sum(c.client_cpu_s for c in items)
        known = bool(items) and all(c.server_cpu_s is not None for c in items)
        server = sum(c.server_cpu_s or 0.0 for c in items) if known else None
        pids = sorted({p for c in items for p in c.server_pids})
        return ObserverCost(wall_s=round(sum(c.wall_s for c in items), 6), client_cpu_s=round(client, 6),
                            server_cpu_s=round(server, 6) if server is not None else None, server_pids=pids,
                            ratio=round(client / server, 6) if server else None,
                            note=None if known else next((c.note for c in items if c.note), None))

    def sentence(self) -> str:
        own = f"servepack used {self.client_cpu_s:.2f} CPU-s"
        if self.server_cpu_s is None:
            return f"{own} over {self.wall_s:.1f} s; the server's CPU time is unknown ({self.note or 'no pid'})"
        ratio = f" (ratio {self.ratio:.3f})" if self.ratio is not None else ""
        return f"{own}, the server {self.server_cpu_s:.2f} CPU-s over {self.wall_s:.1f} s{ratio}"


def _tree_ticks(roots: list[int], procs: dict[int, ProcTick]) -> dict[tuple[int, int], int]:
    """CPU ticks of the roots and their descendants, keyed by (pid, start time) so a reused pid is not summed."""
    return {(pid, procs[pid].start): procs[pid].ticks for pid in descendants(roots, procs) if pid in procs}


class CpuMeter:
    """`start()` then `stop()` → ObserverCost for the window between them."""

    def __init__(self, server_pids: Iterable[int | None], reader: ProcReader | None = None) -> None:
        # servepack's own process is never the server's (a server in a thread of this process is not measured)
        self.pids = [p for p in server_pids if p and p != os.getpid()]
        self.reader = reader or ProcReader()
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._t0 = self._cpu0 = 0.0
        self._ticks0: dict[tuple[int, int], int] = {}
        self._started = False

    def _server_ticks(self) -> dict[tuple[int, int], int]:
        return _tree_ticks(self.pids, self.reader.processes()) if self.pids else {}

    def start(self) -> CpuMeter:
        self._ticks0 = self._server_ticks()
        self._t0, self._cpu0 = time.perf_counter(), time.process_time()
        self._started = True
        return self

    def stop(self) -> ObserverCost:
        if not self._started:
            return ObserverCost(wall_s=0.0, client_cpu_s=0.0, note="the window never started")
        wall, client = time.perf_counter() - self._t0, time.process_time() - self._cpu0
        if not self.pids:
            return ObserverCost(wall_s=round(wall, 6), client_cpu_s=round(client, 6),
                                note="the server's processes are not known on this host")
        end = self._server_ticks()
        if not end and not self._ticks0:
            return ObserverCost(wall_s=round(wall, 6), client_cpu_s=round(client, 6), server_pids=self.pids,
                                note=f"no /proc/<pid>/stat readable for pids {self.pids}")
        # A process present at the end and not at the start began inside the window: all its time counts.
        ticks = sum(t - self._ticks0.get(k, 0) for k, t in end.items())
        server = ticks / self.hz
        return ObserverCost(wall_s=round(wall, 6), client_cpu_s=round(client, 6), server_cpu_s=round(server, 6),
                            server_pids=self.pids, ratio=round(client / server, 6) if server > 0 else None,
                            note=None if server > 0 else "the server used no measurable CPU time")
