"""Host contention watch: who else used the machine while a sample was measured.

A background thread reads, every `interval_s`, the CPU time of the whole host (/proc/stat: busy and steal
jiffies), the CPU time of every process (/proc/<pid>/stat), the load average, the CPU frequency and thermal
throttle counters where the OS exposes them, and GPU utilisation by other processes where NVML shows it.
The engine's process tree and servepack's own tree are excluded; everything else is "others". Taking the
others' CPU as (host busy − own busy) catches short-lived processes (a compiler storm) that a per-process
scan misses; the per-process scan names the biggest of them.

A reading over a window (one request, one phase) is `contended` when others held at least
`ContentionPolicy.share` of the logical cores, or the hypervisor stole at least `steal_pct` of the time.
Readers are injected (`HostReader`), so the classification is tested on synthetic /proc readings.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from pydantic import Field

from servepack.host import nvml
from servepack.host.ticker import Ticker
from servepack.settings import parse_duration as parse_duration  # its home is settings (one grammar)
from servepack.strict import Strict

CONTENTION_SCHEMA: Final = "servepack.host_contention/v1"
CLK_TCK: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
TOP_N: Final = 5
TOP_MIN_CORES: Final = 0.05


@dataclass(frozen=True)
class ContentionPolicy:
    """When a window counts as contended: others' share of the logical cores, or stolen time."""

    share: float = 0.10
    steal_pct: float = 10.0
    gpu_others_pct: float = 10.0

    def describe(self, cores: int) -> str:
        return (f"others ≥ {self.share:.0%} of {cores} logical cores ({self.share * cores:.2f} cores), "
                f"steal ≥ {self.steal_pct:g}%, or other processes' GPU use ≥ {self.gpu_others_pct:g}%")


@dataclass(frozen=True)
class CpuTimes:
    """/proc/stat's aggregate line, in jiffies: busy (user+nice+system+irq+softirq), steal, and everything."""

    busy: int
    steal: int
    total: int


@dataclass(frozen=True)
class ProcTick:
    ppid: int
    ticks: int  # utime + stime, jiffies
    start: int  # starttime, to tell a reused pid from the same process
    name: str


class HostReader(Protocol):
    """What the watch reads; the real one reads /proc and /sys, tests pass their own."""

    def cores(self) -> int: ...
    def cpu_times(self) -> CpuTimes | None: ...
    def processes(self) -> dict[int, ProcTick]: ...
    def loadavg(self) -> float | None: ...
    def cpu_mhz(self) -> float | None: ...
    def throttle_count(self) -> int | None: ...
    def gpu_others_pct(self, exclude: set[int]) -> float | None: ...
    def unavailable(self) -> list[str]: ...


class ProcReader:
    """Linux /proc and /sys; NVML for GPUs when it loads. Anything missing is named in `unavailable()`."""

    def __init__(self, proc: Path = Path("/proc"), sys_cpu: Path = Path("/sys/devices/system/cpu")) -> None:
        self.proc, self.sys_cpu = proc, sys_cpu
        self._missing: dict[str, str] = {}
        self._nvml: nvml.Nvml | None = None
        self._gpus: list[int] = []
        self._gpu_ts: dict[int, int] = {}
        self._nvml_tried = False

    def cores(self) -> int:
        return os.cpu_count() or 1

    def cpu_times(self) -> CpuTimes | None:
        try:
            line = (self.proc / "stat").read_text().splitlines()[0]
        except (OSError, IndexError):
            self._missing["cpu"] = "/proc/stat unreadable: others' CPU time unknown"
            return None
        v = [int(x) for x in line.split()[1:]]
        v += [0] * (8 - len(v))
        user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
        # guest time is already inside user/nice on Linux
        return CpuTimes(busy=user + nice + system + irq + softirq, steal=steal,
                        total=user + nice + system + idle + iowait + irq + softirq + steal)

    def processes(self) -> dict[int, ProcTick]:
        out: dict[int, ProcTick] = {}
        try:
            names = os.listdir(self.proc)
        except OSError:
            return out
        for name in names:
            if not name.isdigit():
                continue
            try:
                with open(self.proc / name / "stat", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue  # exited between listdir and open
            right = data.rfind(b")")
            fields = data[right + 2:].split()
            if len(fields) < 20:
                continue
            out[int(name)] = ProcTick(ppid=int(fields[1]), ticks=int(fields[11]) + int(fields[12]),
                                      start=int(fields[19]),
                                      name=data[data.find(b"(") + 1:right].decode("utf-8", errors="replace"))
        return out

    def loadavg(self) -> float | None:
        try:
            return os.getloadavg()[0]
        except OSError:
            self._missing["load"] = "load average unavailable"
            return None

    def cpu_mhz(self) -> float | None:
        values = []
        for p in self.sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
            with contextlib.suppress(OSError, ValueError):
                values.append(int(p.read_text()) / 1000)
        if not values:
            try:
                text = (self.proc / "cpuinfo").read_text()
            except OSError:
                text = ""
            for line in text.splitlines():
                if line.lower().startswith("cpu mhz"):
                    with contextlib.suppress(ValueError):
                        values.append(float(line.split(":", 1)[1]))
        if not values:
            self._missing["freq"] = "CPU frequency not exposed"
            return None
        return sum(values) / len(values)

    def throttle_count(self) -> int | None:
        paths = list(self.sys_cpu.glob("cpu[0-9]*/thermal_throttle/core_throttle_count"))
        if not paths:
            self._missing["throttle"] = "thermal throttle counters not exposed (no /sys/.../thermal_throttle)"
            return None
        total = 0
        for p in paths:
            with contextlib.suppress(OSError, ValueError):
                total += int(p.read_text())
        return total

    def _init_nvml(self) -> None:
        self._nvml_tried = True
        nv = nvml.nvml()
        count = nv if isinstance(nv, nvml.Unreadable) else nv.count()
        if isinstance(count, nvml.Unreadable):
            self._missing["gpu"] = f"GPU use by others unknown: {count.reason}"
        elif count == 0:
            self._missing["gpu"] = "NVML sees no GPU"
        elif not isinstance(nv, nvml.Unreadable):
            self._nvml, self._gpus = nv, list(range(count))

    def gpu_others_pct(self, exclude: set[int]) -> float | None:
        """The highest SM utilisation (%) any device saw from processes outside `exclude` since the last call."""
        if not self._nvml_tried:
            self._init_nvml()
        if self._nvml is None:
            return None
        worst = 0.0
        for i in self._gpus:
            samples = self._nvml.process_utilisation(i, self._gpu_ts.get(i, 0))
            if isinstance(samples, nvml.Unreadable):
                self._missing["gpu"] = f"per-process GPU utilisation not supported here ({samples.reason})"
                return None
            for s in samples:
                self._gpu_ts[i] = max(self._gpu_ts.get(i, 0), s.timestamp_us)
                if s.pid not in exclude:
                    worst = max(worst, s.sm_pct)
        return worst

    def unavailable(self) -> list[str]:
        return sorted(set(self._missing.values()))

    def close(self) -> None:
        pass  # NVML stays loaded for the process (host.nvml)


class HostReading(Strict):
    """The host over one window (a request, a phase): others' CPU, steal, load, frequency, GPU, the verdict."""

    window_s: float
    others_cores: float | None = Field(description="CPU cores' worth of time used outside servepack and the engine")
    others_share: float | None = Field(description="others_cores ÷ logical cores")
    own_cores: float | None = Field(description="servepack and the engine's process tree")
    steal_pct: float | None = None
    load1: float | None = None
    cpu_mhz: float | None = None
    throttle_events: int | None = None
    gpu_others_pct: float | None = None
    top: list[str] = Field(default_factory=list, description="the biggest other processes: 'name (pid N) x cores'")
    contended: bool
    reason: str | None = Field(None, description="why contended, in figures")

    @property
    def watched(self) -> bool:
        """False when this host exposes no CPU accounting: such a window proves nothing either way."""
        return self.others_cores is not None


class IdleCheck(Strict):
    """The check before measuring: was the host quiet, how long servepack waited for it."""

    quiet: bool
    waited_s: float
    wait_bound_s: float
    reading: HostReading
    message: str


class ContentionSummary(Strict):
    """A bench's (or a phase's) contention in a few figures; per-sample readings are in requests.jsonl."""

    schema_version: str = CONTENTION_SCHEMA
    policy: str
    cores: int
    engine_identified: bool
    idle_check: IdleCheck | None = None
    samples: int = 0
    samples_contended: int = 0
    others_cores_max: float | None = None
    others_cores_median: float | None = None
    steal_pct_max: float | None = None
    load1_min: float | None = None
    load1_max: float | None = None
    cpu_mhz_min: float | None = None
    cpu_mhz_max: float | None = None
    throttle_events: int | None = None
    gpu_others_pct_max: float | None = None
    top: list[str] = Field(default_factory=list, description="biggest others over contended samples")
    unavailable: list[str] = Field(default_factory=list)
    phases: dict[str, HostReading] = Field(default_factory=dict, description="whole-phase readings (bench, smoke …)")


@dataclass
class _Tick:
    t: float  # unix time
    busy: int | None
    steal: int | None
    total: int | None
    own: int  # jiffies of the excluded trees since the previous tick
    per_pid: dict[int, int]  # others' jiffies since the previous tick (non-zero only)
    load1: float | None
    mhz: float | None
    throttle: int | None
    gpu_others: float | None
    blind: bool = False  # neither host CPU times nor any process could be read


def descendants(roots: Iterable[int], procs: dict[int, ProcTick]) -> set[int]:
    """The roots and every process below them, by parent pid."""
    children: dict[int, list[int]] = {}
    for pid, p in procs.items():
        children.setdefault(p.ppid, []).append(pid)
    out, stack = set(), [r for r in roots if r]
    while stack:
        pid = stack.pop()
        if pid in out:
            continue
        out.add(pid)
        stack.extend(children.get(pid, []))
    return out


class ContentionWatch:
    """Samples the host in a daemon thread; `reading(t0, t1)` classifies any window since it started.

    `exclude` returns the root pids whose trees are not "others" (servepack itself and the engine's processes);
    it is called at every tick, so an engine launched after the watch started is excluded from then on.
    """

    def __init__(self, exclude: Callable[[], Iterable[int]] | None = None, *, reader: HostReader | None = None,
                 policy: ContentionPolicy | None = None, interval_s: float = 0.5, keep_s: float = 3600.0,
                 engine_identified: bool = True) -> None:
        self.reader: HostReader = reader or ProcReader()
        self.policy = policy or ContentionPolicy()
        self.interval_s = interval_s
        self.engine_identified = engine_identified
        self._exclude = exclude or (lambda: [os.getpid()])
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        # a failed read must never stop the measurement
        self._ticker = Ticker("servepack-contention", interval_s, self.tick, quiet=True)
        self._ticks: deque[_Tick] = deque(maxlen=max(16, int(keep_s / interval_s)))
        self._prev_cpu: CpuTimes | None = None
        self._prev_procs: dict[int, ProcTick] = {}
        self._prev_throttle: int | None = None
        self._ticked = False
        self._names: dict[int, str] = {}
        self.cores = max(1, self.reader.cores())
        self._phases: dict[str, HostReading] = {}
        self._readings: list[HostReading] = []
        self.idle_check: IdleCheck | None = None

    # -- sampling -----------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Take one reading now (the thread calls this; tests call it by hand with a scripted reader)."""
        with self._tick_lock:
            self._tick()

    def _tick(self) -> None:
        t = time.time()
        cpu = self.reader.cpu_times()
        procs = self.reader.processes()
        roots = set(self._exclude())
        excluded = descendants(roots, procs)
        own, per_pid = 0, {}
        for pid, p in procs.items():
            before = self._prev_procs.get(pid)
            delta = p.ticks - before.ticks if before is not None and before.start == p.start else p.ticks
            if not self._ticked:
                delta = 0  # the first scan has no baseline
            if delta <= 0:
                continue
            if pid in excluded:
                own += delta
            else:
                per_pid[pid] = delta
                self._names[pid] = p.name
        throttle = self.reader.throttle_count()
        tick = _Tick(
            t=t, busy=cpu.busy - self._prev_cpu.busy if cpu and self._prev_cpu else None,
            steal=cpu.steal - self._prev_cpu.steal if cpu and self._prev_cpu else None,
            total=cpu.total - self._prev_cpu.total if cpu and self._prev_cpu else None,
            own=own, per_pid=per_pid, load1=self.reader.loadavg(), mhz=self.reader.cpu_mhz(),
            throttle=throttle - self._prev_throttle if throttle is not None and self._prev_throttle is not None
            else None,
            gpu_others=self.reader.gpu_others_pct(excluded), blind=cpu is None and not procs,
        )
        with self._lock:
            first = not self._ticked
            self._ticked = True
            self._prev_cpu, self._prev_procs, self._prev_throttle = cpu, procs, throttle
            if not first:
                self._ticks.append(tick)
            else:  # the baseline: no interval before it
                self._ticks.append(_Tick(t=t, busy=None, steal=None, total=None, own=0, per_pid={}, load1=tick.load1,
                                         mhz=tick.mhz, throttle=None, gpu_others=None, blind=tick.blind))

    def start(self) -> ContentionWatch:
        self._ticker.start(first=True)
        return self

    def stop(self) -> None:
        self._ticker.stop()
        close = getattr(self.reader, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> ContentionWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- windows ------------------------------------------------------------------------------------------
    def reading(self, t0: float, t1: float | None = None, *, record: bool = True) -> HostReading:
        """Classify the window [t0, t1] (unix seconds; t1 None = now), widened to the ticks around it."""
        t1 = time.time() if t1 is None else t1
        with self._lock:
            last = self._ticks[-1].t if self._ticks else None
        if last is None or last < t1:
            self.tick()  # the window's end has not been read yet
        with self._lock:
            ticks = list(self._ticks)
        # The ticks whose interval overlaps the window: each tick covers (previous tick, tick].
        idx = [i for i in range(1, len(ticks)) if ticks[i].t > t0 and ticks[i - 1].t < t1]
        if not idx and len(ticks) > 1:
            idx = [len(ticks) - 1]
        chosen = [ticks[i] for i in idx]
        span = ticks[idx[-1]].t - ticks[idx[0] - 1].t if idx else 0.0
        reading = self._classify(chosen, max(span, 1e-9) if idx else 0.0)
        if record:
            with self._lock:
                self._readings.append(reading)
        return reading

    def _classify(self, ticks: list[_Tick], span: float) -> HostReading:
        p = self.policy
        own = sum(k.own for k in ticks)
        cpu = [k for k in ticks if k.busy is not None and k.total]
        others_cores = share = steal_pct = own_cores = None
        if ticks and span > 0 and not all(k.blind for k in ticks):
            own_cores = own / CLK_TCK / span
            per_pid_cores = sum(sum(k.per_pid.values()) for k in ticks) / CLK_TCK / span
            if cpu:
                busy = sum(k.busy or 0 for k in cpu)
                total = sum(k.total or 0 for k in cpu)
                # Host busy minus our own trees; a per-process sum is a floor (it misses exited processes).
                cores_busy = busy / total * self.cores if total else 0.0
                others_cores = max(cores_busy - own_cores, per_pid_cores, 0.0)
                steal_pct = 100 * sum(k.steal or 0 for k in cpu) / total if total else None
            else:
                others_cores = per_pid_cores
            others_cores = min(others_cores, float(self.cores))
            share = others_cores / self.cores
        loads = [k.load1 for k in ticks if k.load1 is not None]
        mhz = [k.mhz for k in ticks if k.mhz is not None]
        thr = [k.throttle for k in ticks if k.throttle is not None]
        gpu = [k.gpu_others for k in ticks if k.gpu_others is not None]
        totals: dict[int, int] = {}
        for k in ticks:
            for pid, d in k.per_pid.items():
                totals[pid] = totals.get(pid, 0) + d
        top = []
        for pid, d in sorted(totals.items(), key=lambda kv: -kv[1])[:TOP_N]:
            cores = d / CLK_TCK / span if span else 0.0
            if cores >= TOP_MIN_CORES:
                top.append(f"{self._names.get(pid, '?')} (pid {pid}) {cores:.2f} cores")
        reasons = []
        if share is not None and share >= p.share:
            reasons.append(f"others held {others_cores:.2f} of {self.cores} cores ({share:.0%})")
        if steal_pct is not None and steal_pct >= p.steal_pct:
            reasons.append(f"steal {steal_pct:.0f}%")
        if gpu and max(gpu) >= p.gpu_others_pct:
            reasons.append(f"other processes used the GPU at {max(gpu):.0f}%")
        if reasons and top:
            reasons[0] += ": " + ", ".join(top[:3])
        return HostReading(
            window_s=round(span, 3), others_cores=_r(others_cores), others_share=_r(share), own_cores=_r(own_cores),
            steal_pct=_r(steal_pct), load1=_r(max(loads), 2) if loads else None,
            cpu_mhz=_r(min(mhz)) if mhz else None, throttle_events=sum(thr) if thr else None,
            gpu_others_pct=max(gpu) if gpu else None, top=top, contended=bool(reasons),
            reason="; ".join(reasons) or None,
        )

    # -- phases and the idle check --------------------------------------------------------------------------
    def phase(self, name: str, t0: float, t1: float | None = None) -> HostReading:
        """A whole phase (bench, a smoke suite) as one reading, kept for the summary."""
        r = self.reading(t0, t1, record=False)
        with self._lock:
            self._phases[name] = r
        return r

    def wait_quiet(self, bound_s: float, say: Callable[[str], None], *, check_s: float = 1.0,
                   sleep: Callable[[float], None] = time.sleep) -> IdleCheck:
        """Before measuring: read the host for `check_s`; if busy, say who and wait up to `bound_s` for quiet.

        Never silent: a quiet host is reported with its figures, a busy one with its processes, and going on
        while still busy is a warning that the samples will be marked.
        """
        t_start = time.monotonic()
        said_at = -1.0
        while True:
            t0 = time.time()
            sleep(check_s)
            r = self.reading(t0, record=False)
            waited = time.monotonic() - t_start
            if not r.contended:
                msg = (f"host quiet: others {_cores(r.others_cores)} of {self.cores} cores, load "
                       f"{_f(r.load1)}" + (f" (after waiting {waited:.0f} s)" if waited > check_s * 1.5 else ""))
                say(msg)
                self.idle_check = IdleCheck(quiet=True, waited_s=round(waited, 1), wait_bound_s=bound_s,
                                            reading=r, message=msg)
                return self.idle_check
            if waited >= bound_s:
                msg = (f"WARNING host busy: {r.reason}; load {_f(r.load1)}"
                       + (f"; still busy after waiting {waited:.0f} s" if bound_s > 0 else
                          " (--wait-quiet DURATION waits for quiet)")
                       + ". Measuring anyway: samples taken while it lasts are marked contended and cannot be "
                         "claimed")
                say(msg)
                self.idle_check = IdleCheck(quiet=False, waited_s=round(waited, 1), wait_bound_s=bound_s,
                                            reading=r, message=msg)
                return self.idle_check
            if waited - said_at >= 10 or said_at < 0:  # the first time, then every 10 s
                said_at = waited
                say(f"host busy: {r.reason}; load {_f(r.load1)}; waiting for quiet "
                    f"({waited:.0f} of {bound_s:.0f} s)")

    def summary(self, readings: Iterable[HostReading] | None = None) -> ContentionSummary:
        with self._lock:
            rs = list(self._readings if readings is None else readings)
            phases = dict(self._phases)
        contended = [r for r in rs if r.contended]
        others = sorted(r.others_cores for r in rs if r.others_cores is not None)
        loads = [r.load1 for r in rs if r.load1 is not None]
        mhz = [r.cpu_mhz for r in rs if r.cpu_mhz is not None]
        thr = [r.throttle_events for r in rs if r.throttle_events is not None]
        gpu = [r.gpu_others_pct for r in rs if r.gpu_others_pct is not None]
        steal = [r.steal_pct for r in rs if r.steal_pct is not None]
        top: list[str] = []
        for r in contended:
            for entry in r.top:
                who = entry.split(")")[0]  # "name (pid N"
                if all(not t.startswith(who + ")") for t in top):
                    top.append(entry)
        return ContentionSummary(
            policy=self.policy.describe(self.cores), cores=self.cores, engine_identified=self.engine_identified,
            idle_check=self.idle_check, samples=len(rs), samples_contended=len(contended),
            others_cores_max=max(others) if others else None,
            others_cores_median=others[len(others) // 2] if others else None,
            steal_pct_max=max(steal) if steal else None, load1_min=min(loads) if loads else None,
            load1_max=max(loads) if loads else None, cpu_mhz_min=min(mhz) if mhz else None,
            cpu_mhz_max=max(mhz) if mhz else None, throttle_events=sum(thr) if thr else None,
            gpu_others_pct_max=max(gpu) if gpu else None, top=top[:TOP_N], unavailable=self.reader.unavailable(),
            phases=phases,
        )


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


def _f(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f}"


def _cores(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f}"


@dataclass
class ExcludeSet:
    """Root pids whose process trees are not "others": servepack itself and the engine's processes."""

    pids: list[int] = field(default_factory=lambda: [os.getpid()])

    def add(self, *pids: int | None) -> None:
        self.pids.extend(p for p in pids if p)

    def __call__(self) -> list[int]:
        return list(self.pids)


def listening_pid(port: int) -> int | None:
    """The pid listening on a local TCP port (an attached server on loopback), when this user may see it."""
    try:
        import psutil

        for c in psutil.net_connections("tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return int(c.pid)
    except Exception:  # AccessDenied on some hosts; then the engine is simply not identified
        return None
    return None
