"""Background memory sampler (≥ 10 Hz): server RSS, host available RAM, free swap, GPU memory; guards."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from types import TracebackType
from typing import Any, Final, Literal

import psutil
from pydantic import Field

from servepack.host import nvml
from servepack.host.threads import read_proc
from servepack.host.ticker import Ticker
from servepack.packs.schema import Guards
from servepack.store import JsonlWriter
from servepack.strict import Strict

MEMORY_SCHEMA: Final = "servepack.memory/v1"
GIB = 1 << 30


class GuardEvent(Strict):
    """A pack guard crossed: which one, its threshold and what was observed (GiB)."""

    guard: Literal["min_available_ram_gb", "min_free_swap_gb"]
    threshold_gib: float
    observed_gib: float
    t_unix: float
    label: str | None = Field(None, description="the last mark before the crossing")

    def stop_reason(self) -> str:
        """Why a run stops for it, in the words a bench cell, a capacity point and their records say."""
        return f"guard {self.guard}: {self.observed_gib:.2f} GiB < {self.threshold_gib:g} GiB"


class MemorySummary(Strict):
    """The memory timeline in a few figures; bytes unless the name says otherwise."""

    schema_version: Literal["servepack.memory/v1"] = MEMORY_SCHEMA
    samples: int
    duration_s: float
    interval_s: float
    peak_server_rss_bytes: int | None
    host_available_before_load_bytes: int | None = Field(description="first sample, before the server loaded")
    host_available_after_load_bytes: int | None = Field(description="at the model_loaded mark")
    min_available_bytes: int | None
    swap_total_bytes: int
    min_swap_free_bytes: int | None
    gpu_peak_used_bytes: int | None
    gpu_unavailable_reason: str | None
    marks: list[dict[str, Any]]
    guard_events: list[GuardEvent]


class _Gpu:
    """NVML memory reading, or the reason there is none."""

    def __init__(self) -> None:
        self.count = 0
        self.reason: str | None = None
        nv = nvml.nvml()
        count = nv if isinstance(nv, nvml.Unreadable) else nv.count()
        if isinstance(count, nvml.Unreadable):
            self.reason = count.reason
        elif count == 0:
            self.reason = "NVML sees no GPU"
        else:
            self.count = count
        self.nv = nv

    def used(self) -> int | None:
        if not self.count or self.reason or isinstance(self.nv, nvml.Unreadable):
            return None
        total = 0
        for i in range(self.count):
            m = self.nv.memory(i)
            if isinstance(m, nvml.Unreadable):  # GB10 and other unified-memory parts report "Not Supported"
                self.reason = f"NVML reports no device memory ({m.reason}); unified memory: see host RAM"
                return None
            total += m.used_bytes
        return total

    def close(self) -> None:
        pass  # NVML stays loaded for the process (host.nvml)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_rss(pid: int) -> int | None:
    """One process's RSS: its resident pages in /proc/PID/statm (what psutil reads on Linux, without building a
    Process), else psutil; None when it is gone."""
    data = read_proc(f"/proc/{pid}/statm")
    if data is not None:
        with contextlib.suppress(IndexError, ValueError):
            return int(data.split()[1]) * _PAGE
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class TreeRss:
    """The RSS of a process and all its descendants (None when it is gone), cheaply enough for ten readings a
    second: listing a process's descendants scans every process on the host (≈1 ms, most of a reading's cost), so the
    list is kept and listed again every `refresh_s` (and when the process changes); each reading sums the RSS of the
    process and the descendants listed. A child started since the last listing is counted from the next one, at most
    `refresh_s` later."""

    def __init__(self, refresh_s: float = 1.0) -> None:
        self.refresh_s = refresh_s
        self._pid: int | None = None
        self._kids: list[int] = []
        self._listed = -math.inf

    def read(self, pid: int) -> int | None:
        now = time.monotonic()
        if pid != self._pid or now - self._listed >= self.refresh_s:
            try:
                self._kids = [c.pid for c in psutil.Process(pid).children(recursive=True)]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return None
            self._pid, self._listed = pid, now
        root = process_rss(pid)
        if root is None:
            return None
        return root + sum(r for k in self._kids if (r := process_rss(k)) is not None)


def host_memory() -> tuple[int, int, int]:
    """(available RAM, free swap, total swap) in bytes: one read of /proc/meminfo (psutil reads it twice, and
    /proc/vmstat, for the same figures), else psutil's."""
    data = read_proc("/proc/meminfo", 65536)
    if data is not None:
        found: dict[bytes, int] = {}
        for line in data.split(b"\n"):
            key, _, rest = line.partition(b":")
            if key in (b"MemAvailable", b"SwapFree", b"SwapTotal"):
                with contextlib.suppress(IndexError, ValueError):
                    found[key] = int(rest.split()[0]) * 1024  # kB
        if b"MemAvailable" in found:
            return found[b"MemAvailable"], found.get(b"SwapFree", 0), found.get(b"SwapTotal", 0)
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    return int(vm.available), int(sw.free), int(sw.total)


class MemorySampler:
    """Samples in a daemon thread until stopped; crossing a guard records a GuardEvent (first one trips)."""

    def __init__(self, pid: int | None, writer: JsonlWriter | None = None, *, interval_s: float = 0.1,
                 guards: Guards | None = None) -> None:
        self.pid, self.writer, self.interval_s, self.guards = pid, writer, interval_s, guards
        self._lock = threading.Lock()
        self._ticker = Ticker("servepack-memory", interval_s, self.sample)
        self._tree = TreeRss()
        self._gpu: _Gpu | None = None
        self._t0 = time.monotonic()
        self._t_end: float | None = None
        self._n = 0
        self._peak_rss: int | None = None
        self._first_avail: int | None = None
        self._after_load: int | None = None
        self._min_avail: int | None = None
        self._min_swap: int | None = None
        self._swap_total = 0
        self._gpu_peak: int | None = None
        self._marks: list[dict[str, Any]] = []
        self._events: list[GuardEvent] = []

    def set_pid(self, pid: int | None) -> None:
        with self._lock:
            self.pid = pid

    def start(self) -> MemorySampler:
        if not self._ticker.started:
            self._gpu = _Gpu()
            self._t0 = time.monotonic()
            self._ticker.start(first=True)  # the first sample now, then the thread
        return self

    def stop(self) -> None:
        self._ticker.stop()
        if self._t_end is None:
            self._t_end = time.monotonic()
            if self._gpu is not None:
                self._gpu.close()

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def mark(self, label: str) -> None:
        """A labelled point of the timeline (e.g. "model_loaded"), sampled now."""
        rec = self.sample(label)
        with self._lock:
            avail = rec["host_available_bytes"]
            self._marks.append({"label": label, "t_unix": rec["t_unix"], "host_available_bytes": avail})
            if label == "model_loaded":
                self._after_load = rec["host_available_bytes"]

    @property
    def tripped(self) -> GuardEvent | None:
        with self._lock:
            return self._events[0] if self._events else None

    def stop_reason(self) -> str | None:
        """Why a running point must stop now (a guard tripped), or None: what a point's `stop` asks."""
        event = self.tripped
        return event.stop_reason() if event is not None else None

    def sample(self, label: str | None = None) -> dict[str, Any]:
        available, swap_free, swap_total = host_memory()
        pid = self.pid
        rss = self._tree.read(pid) if pid else None
        gpu = self._gpu.used() if self._gpu else None
        rec: dict[str, Any] = {
            "schema_version": MEMORY_SCHEMA, "t_unix": time.time(), "t_s": round(time.monotonic() - self._t0, 4),
            "server_pid": pid, "server_rss_bytes": rss, "host_available_bytes": available,
            "swap_free_bytes": swap_free, "gpu_used_bytes": gpu, "label": label,
        }
        with self._lock:
            self._n += 1
            self._swap_total = swap_total
            if self._first_avail is None:
                self._first_avail = rec["host_available_bytes"]
            self._peak_rss = _max(self._peak_rss, rss)
            self._gpu_peak = _max(self._gpu_peak, gpu)
            self._min_avail = _min(self._min_avail, rec["host_available_bytes"])
            self._min_swap = _min(self._min_swap, rec["swap_free_bytes"]) if swap_total else self._min_swap
            self._check_guards(rec, has_swap=swap_total > 0)
            if self.writer is not None:
                with contextlib.suppress(ValueError, OSError, AssertionError):
                    self.writer.write(rec)
        return rec

    def _check_guards(self, rec: dict[str, Any], *, has_swap: bool) -> None:
        g = self.guards
        if g is None:
            return
        fired = {e.guard for e in self._events}
        checks: list[tuple[Literal["min_available_ram_gb", "min_free_swap_gb"], float | None, int, bool]] = [
            ("min_available_ram_gb", g.min_available_ram_gb, rec["host_available_bytes"], True),
            ("min_free_swap_gb", g.min_free_swap_gb, rec["swap_free_bytes"], has_swap),
        ]
        for name, limit, value, applies in checks:
            if applies and limit is not None and name not in fired and value < limit * GIB:
                last = self._marks[-1]["label"] if self._marks else None
                self._events.append(GuardEvent(guard=name, threshold_gib=limit, observed_gib=value / GIB,
                                               t_unix=rec["t_unix"], label=last))

    def summary(self) -> MemorySummary:
        with self._lock:
            end = self._t_end if self._t_end is not None else time.monotonic()
            reason = self._gpu.reason if self._gpu else "sampler never started"
            return MemorySummary(
                samples=self._n, duration_s=round(end - self._t0, 3), interval_s=self.interval_s,
                peak_server_rss_bytes=self._peak_rss, host_available_before_load_bytes=self._first_avail,
                host_available_after_load_bytes=self._after_load, min_available_bytes=self._min_avail,
                swap_total_bytes=self._swap_total, min_swap_free_bytes=self._min_swap,
                gpu_peak_used_bytes=self._gpu_peak, gpu_unavailable_reason=None if self._gpu_peak else reason,
                marks=list(self._marks), guard_events=list(self._events),
            )


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
