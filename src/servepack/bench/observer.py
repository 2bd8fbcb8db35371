"""What servepack observes beside the load: its own cost, and what the machine did during each point.

**Evidence** (`PointWatch`): through a sweep, every `interval_s`, the GPUs' utilisation (NVML through
`host.nvml`: SM busy and memory busy) and the host's CPU and steal (/proc/stat); the CPU ticks of every thread of
the server's process tree (`host.threads`: two /proc files a thread, and a CUDA llama-server has over a hundred)
on every `threads_every`-th of those readings and on every reading asked for (`tick()`: the sweep's before each
point, `window`'s at its end). `window(t0, t1)` turns the readings around one point into its `PointEvidence`:
thread and host shares from the readings at the window's ends (for the threads, the nearest that read them), GPU
means over the readings inside it. A meter that fails, or a GPU lost mid-run, makes that figure None for the points
it touched, with the reason; a host without NVML is recorded as having no GPU meter, never as an idle GPU.

**Observer cost**: the CPU time servepack itself spends measuring, beside the CPU time of the server it measures.

servepack's own: `time.process_time()` of this process (every thread: the client, the memory sampler, the
contention watch, and a fake server when a test runs one in a thread). The server's: utime + stime from
/proc/<pid>/stat of every process behind the endpoint on this host and their descendants, read at the start and
the end of the window (a process that exits in between is counted up to its last reading). When no server pid
is known (an attached server whose process is not visible), the server's time is unknown and so is the ratio.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar

from pydantic import Field

from servepack.engine.base import Endpoint
from servepack.host import nvml
from servepack.host.contention import CpuTimes, ProcReader, ProcTick, descendants
from servepack.host.threads import ThreadReader, ThreadTick, thread_use
from servepack.host.ticker import Ticker
from servepack.strict import Strict


def local_pids(endpoint: Endpoint) -> list[int]:
    """The pids of the endpoint's processes on this host (a remote worker's pid means nothing here)."""
    local = {"127.0.0.1", "::1", "localhost", socket.gethostname()}
    return [p.pid for p in endpoint.processes if p.pid and p.host in local]


class GpuUse(Strict):
    """One device's utilisation over a point (NVML, mean of the samples taken during it)."""

    index: int
    sm_pct: float | None = Field(description="share of time a kernel ran (NVML utilization.gpu), %")
    mem_bw_pct: float | None = Field(description="share of time device memory was read or written "
                                                 "(NVML utilization.memory), %")


class PointEvidence(Strict):
    """What the machine did during one point: the figures the limit verdict is taken from.

    A figure is None when its meter is absent or could not be read for this point; the matching `*_note` says
    which (and, beside a figure, how many of the point's readings failed), so an absent meter is never read as an
    idle resource.
    """

    window_s: float = Field(description="seconds covered by the readings (the point, widened to the ticks around it)")
    samples: int = Field(description="readings taken during the point")
    gpu_state: Literal["measured", "absent", "unreadable"] = Field(
        "absent", description="absent: no GPU meter on this host; unreadable: one failed during the point")
    gpus: list[GpuUse] = Field(default_factory=list)
    gpu_sm_pct: float | None = Field(None, description="the busiest device's SM utilisation, %")
    gpu_mem_bw_pct: float | None = Field(None, description="the busiest device's memory-bandwidth utilisation, %")
    gpu_note: str | None = Field(None, description="why there are no GPU figures (absent or unreadable)")
    server_thread_pct: float | None = Field(None, description="the server's busiest thread, % of one core")
    server_thread_wait_pct: float | None = Field(None, description="that thread runnable but waiting for a core, "
                                                                   "% of the window (schedstat)")
    server_thread: str | None = Field(None, description="that thread: 'name (pid P, tid T)'")
    server_threads: int | None = Field(None, description="threads of the server's process tree seen")
    server_cpu_cores: float | None = Field(None, description="the server's whole process tree, cores")
    server_wait_cores: float | None = Field(None, description="its threads runnable but waiting for a core, cores")
    server_note: str | None = None
    host_cpu_pct: float | None = Field(None, description="busy share of all logical cores (/proc/stat), %")
    host_steal_pct: float | None = Field(None, description="time the hypervisor stole (/proc/stat), %")
    host_cores: int | None = None
    host_note: str | None = None

    @property
    def server_thread_runnable_pct(self) -> float | None:
        """The busiest thread's running plus waiting-for-a-core time: how much of a core it asked for."""
        if self.server_thread_pct is None:
            return None
        return self.server_thread_pct + (self.server_thread_wait_pct or 0.0)

    @property
    def server_other_cores(self) -> float | None:
        """Cores the server's other threads used together (its whole tree less the busiest thread)."""
        if self.server_cpu_cores is None or self.server_thread_pct is None:
            return None
        return max(self.server_cpu_cores - self.server_thread_pct / 100, 0.0)


class ObserverCost(Strict):
    """CPU-seconds spent by servepack and by the server over one window."""

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

    def stop(self, others_cpu_s: float = 0.0) -> ObserverCost:
        """The window's cost. `others_cpu_s`: CPU-seconds servepack spent in other processes over the window (a
        point's client workers: `process_time` sees only this one), counted in its own time and the ratio."""
        if not self._started:
            return ObserverCost(wall_s=0.0, client_cpu_s=0.0, note="the window never started")
        wall = time.perf_counter() - self._t0
        client = time.process_time() - self._cpu0 + others_cpu_s
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


# -- evidence during a point ------------------------------------------------------------------------------------

NOT_KNOWN = "the server's processes are not known on this host"
GpuRead = Callable[[], "list[nvml.Utilisation | nvml.Unreadable] | nvml.Unreadable"]
Threads = dict[tuple[int, int], ThreadTick]
C = TypeVar("C")  # a counter meter's value (thread ticks, /proc/stat times)


def nvml_utilisation() -> list[nvml.Utilisation | nvml.Unreadable] | nvml.Unreadable:
    """Every device's utilisation now, through the one NVML wrapper."""
    n = nvml.device_count()
    if isinstance(n, nvml.Unreadable):
        return n
    return [nvml.utilisation(i) for i in range(n)]


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class _Reading:
    t: float  # unix seconds
    cpu: CpuTimes | str  # str: why it could not be read
    threads: Threads | str | None  # None: not read at this tick (only every `threads_every`-th periodic one)
    gpu: list[nvml.Utilisation | nvml.Unreadable] | nvml.Unreadable | None  # None: this host has no GPU meter


class PointWatch:
    """Reads the GPUs, the server's threads and the host every `interval_s` from `start()` to `stop()`.

    The readers are injected (tests script a GPU that fails mid-run, or a /proc of their own). The periodic
    readings read the server's threads on every `threads_every`-th only (the thread figures come from the readings
    at a point's ends; the ones between are spares for an end that fails), `tick()` always; the tree of the
    server's processes is walked again every `tree_every` thread readings (about every 10 s, as before), so a child
    started later is seen.
    """

    def __init__(self, server_pids: Iterable[int | None], *, interval_s: float = 1.0, gpu: GpuRead | None = None,
                 threads: ThreadReader | None = None, host: Callable[[], CpuTimes | None] | None = None,
                 cores: int | None = None, tree_every: int = 2, threads_every: int = 5, keep: int = 8192) -> None:
        # servepack's own process is never the server's (a server in a thread of this process is not measured)
        self.roots = [p for p in server_pids if p and p != os.getpid()]
        self.cores = cores or os.cpu_count() or 1
        self._gpu = gpu or nvml_utilisation
        self._threads = threads or ThreadReader()
        self._host = host or ProcReader().cpu_times
        self._tree_every = max(1, tree_every)
        self._threads_every = max(1, threads_every)
        self._readings: deque[_Reading] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        # a failed reading must never stop the sweep
        self._ticker = Ticker("servepack-point-watch", interval_s, self._periodic, quiet=True)
        self._tree: list[int] = []
        self._count = 0  # thread readings taken
        self._periodic_count = 0
        self._gpu_seen = False
        self.gpu_absent: str | None = None  # why this host has no GPU meter (decided at the first reading)

    def start(self) -> PointWatch:
        self._ticker.start(first=True)
        return self

    def stop(self) -> None:
        self._ticker.stop()

    def follow(self, server_pids: Iterable[int | None]) -> None:
        """Watch these processes from now on (a fresh server for the next point): its tree is walked anew."""
        with self._tick_lock:
            self.roots = [p for p in server_pids if p and p != os.getpid()]
            self._tree = []

    def __enter__(self) -> PointWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tick(self) -> None:
        """Take one whole reading now (`window` calls it for a point's end; the sweep, before each point)."""
        self._take(threads=True)

    def _periodic(self) -> None:
        """The thread's reading: the server's threads on every `threads_every`-th (the first included)."""
        self._take(threads=self._periodic_count % self._threads_every == 0)
        self._periodic_count += 1

    def _take(self, *, threads: bool) -> None:
        with self._tick_lock:
            reading = _Reading(t=time.time(), cpu=self._read_host(), threads=self._read_threads() if threads else None,
                               gpu=self._read_gpu())
            if threads:
                self._count += 1
        with self._lock:
            self._readings.append(reading)

    def _read_host(self) -> CpuTimes | str:
        try:
            return self._host() or "/proc/stat unreadable"
        except Exception as exc:
            return f"host CPU meter failed: {_why(exc)}"

    def _read_threads(self) -> Threads | str:
        if not self.roots:
            return NOT_KNOWN
        try:
            if not self._tree or self._count % self._tree_every == 0:
                self._tree = self._threads.tree(self.roots) or self._tree
            got = self._threads.threads(self._tree or self.roots)
        except Exception as exc:
            return f"thread meter failed: {_why(exc)}"
        return got or f"no thread of pids {self.roots} under /proc (exited?)"

    def _read_gpu(self) -> list[nvml.Utilisation | nvml.Unreadable] | nvml.Unreadable | None:
        if self.gpu_absent is not None:
            return None
        try:
            got = self._gpu()
        except Exception as exc:
            got = nvml.Unreadable(f"GPU meter failed: {_why(exc)}")
        if not self._gpu_seen:  # the first reading decides whether this host has a GPU meter at all
            if isinstance(got, nvml.Unreadable) or not got:
                self.gpu_absent = got.reason if isinstance(got, nvml.Unreadable) else "NVML sees no GPU"
                return None
            self._gpu_seen = True
        return got

    def window(self, t0: float, t1: float) -> PointEvidence:
        """The evidence for [t0, t1] (unix seconds), from the readings at or around its ends."""
        with self._lock:
            last = self._readings[-1].t if self._readings else None
            ended = any(r.t >= t1 and r.threads is not None for r in self._readings)
        if last is None or last < t1 or not ended:
            self.tick()  # the point's end has not been read yet (for the threads: not since a periodic reading)
        with self._lock:
            readings = list(self._readings)
        a, b, inside = _ends(readings, t0, t1)
        span = b.t - a.t
        ev = PointEvidence(window_s=round(span, 3), samples=len(inside), host_cores=self.cores)
        if span <= 0:
            why = "a single reading: no window to measure over"
            return ev.model_copy(update={"gpu_state": "unreadable" if self._gpu_seen else "absent",
                                         "gpu_note": self.gpu_absent or why, "server_note": why, "host_note": why})
        read = [r for r in readings if r.threads is not None]  # the readings that read the server's threads
        return ev.model_copy(update={**_gpu_figures(inside, self.gpu_absent),
                                     **(_counter_figures(read, *_ends(read, t0, t1), _THREAD_METER) if self.roots
                                        else {"server_note": NOT_KNOWN}),
                                     **_counter_figures(readings, a, b, inside, _HOST_METER)})


def _ends(readings: list[_Reading], t0: float, t1: float) -> tuple[_Reading, _Reading, list[_Reading]]:
    """The window's readings for [t0, t1]: the last at or before t0 (else the first), the first at or after t1 (else
    the last), and those after the first up to the second."""
    before = [r for r in readings if r.t <= t0]
    a = before[-1] if before else readings[0]
    b = next((r for r in readings if r.t >= t1), readings[-1])
    return a, b, [r for r in readings if a.t < r.t <= b.t]


@dataclass(frozen=True)
class _CounterMeter(Generic[C]):
    """A meter of counters that grow (the server's thread ticks, /proc/stat): figures come from two readings."""

    value: Callable[[_Reading], C | str | None]  # its value in a reading; str: why it could not be read
    note: str  # PointEvidence's field for what went wrong
    what: str  # the readings, in "fewer than two … readings in the point"
    figures: Callable[[C, C, float], dict[str, object] | str]  # (first, last, span s) → figures, or why none


def _counter_figures(readings: list[_Reading], a: _Reading, b: _Reading, inside: list[_Reading],
                     meter: _CounterMeter[C]) -> dict[str, object]:
    """One counter meter's figures over [a, b], from the window's ends for it: `a` and `b`, or the nearest readings
    inside [a, b] that this meter read (one failed reading narrows the window a little instead of losing the point);
    failed readings are counted in its note, readings that did not read it (None) are passed over."""
    values = [v for v in (meter.value(r) for r in [a, *inside]) if v is not None]
    bad = [v for v in values if isinstance(v, str)]
    failed = f"{len(bad)} of {len(values)} readings failed ({bad[0]})" if bad else None
    usable = [r for r in readings if a.t <= r.t <= b.t and not isinstance(meter.value(r), str | None)]
    if len(usable) < 2 or usable[-1].t <= usable[0].t:
        return {meter.note: failed or f"fewer than two {meter.what} readings in the point"}
    first, last = meter.value(usable[0]), meter.value(usable[-1])
    assert not isinstance(first, str | None) and not isinstance(last, str | None)
    got = meter.figures(first, last, usable[-1].t - usable[0].t)
    return {meter.note: got} if isinstance(got, str) else {**got, meter.note: failed}


def _gpu_figures(inside: list[_Reading], absent: str | None) -> dict[str, object]:
    if absent is not None:
        return {"gpu_state": "absent", "gpu_note": absent}
    bad = [g for r in inside for g in (r.gpu if isinstance(r.gpu, list) else [r.gpu])
           if isinstance(g, nvml.Unreadable)]
    reads = [r.gpu for r in inside if isinstance(r.gpu, list)]
    if bad or not reads:
        why = bad[0].reason if bad else "no GPU reading fell inside the point"
        n = f" ({len(bad)} of {len(inside)} readings)" if bad else ""
        return {"gpu_state": "unreadable", "gpu_note": f"unreadable during the point{n}: {why}"}
    devices = max(len(g) for g in reads)
    gpus = []
    for i in range(devices):
        got = [g[i] for g in reads if i < len(g) and isinstance(g[i], nvml.Utilisation)]
        sm = [u.gpu_pct for u in got if isinstance(u, nvml.Utilisation)]
        mem = [u.memory_pct for u in got if isinstance(u, nvml.Utilisation)]
        gpus.append(GpuUse(index=i, sm_pct=round(sum(sm) / len(sm), 1) if sm else None,
                           mem_bw_pct=round(sum(mem) / len(mem), 1) if mem else None))
    sms = [g.sm_pct for g in gpus if g.sm_pct is not None]
    mems = [g.mem_bw_pct for g in gpus if g.mem_bw_pct is not None]
    return {"gpu_state": "measured", "gpus": gpus, "gpu_sm_pct": max(sms) if sms else None,
            "gpu_mem_bw_pct": max(mems) if mems else None}


def _thread_figures(before: Threads, after: Threads, span_s: float) -> dict[str, object] | str:
    use = thread_use(before, after, span_s)
    if use is None:
        return "no thread readable at the point's end"
    return {"server_thread_pct": use.busiest_pct, "server_thread_wait_pct": use.busiest_wait_pct,
            "server_thread": use.busiest, "server_threads": use.threads,
            "server_cpu_cores": use.tree_cores, "server_wait_cores": use.tree_wait_cores}


def _host_figures(before: CpuTimes, after: CpuTimes, span_s: float) -> dict[str, object] | str:
    total = after.total - before.total
    if total <= 0:
        return "/proc/stat did not advance over the point"
    return {"host_cpu_pct": round(100 * (after.busy - before.busy) / total, 1),
            "host_steal_pct": round(100 * (after.steal - before.steal) / total, 1)}


# Only readings that read the server's threads (threads not None) are handed to this meter.
_THREAD_METER: Final[_CounterMeter[Threads]] = _CounterMeter(lambda r: r.threads, "server_note", "thread",
                                                             _thread_figures)
_HOST_METER: Final[_CounterMeter[CpuTimes]] = _CounterMeter(lambda r: r.cpu, "host_note", "/proc/stat",
                                                            _host_figures)
