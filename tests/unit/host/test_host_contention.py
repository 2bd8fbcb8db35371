"""The contention watch on synthetic /proc readings: who counts as "others", when a window is contended."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from servepack.host.contention import (
    CLK_TCK,
    ContentionPolicy,
    ContentionWatch,
    CpuTimes,
    ExcludeSet,
    ProcReader,
    ProcTick,
    parse_duration,
)

SERVEPACK, ENGINE, HOG, SHELL = 100, 101, 500, 1


@dataclass
class Scripted:
    """A host of `n` cores; each `step` adds jiffies to processes and to the host's busy/steal counters."""

    n: int = 2
    busy: int = 0
    steal: int = 0
    total: int = 0
    procs: dict[int, ProcTick] = field(default_factory=dict)
    mhz: float | None = 2400.0
    load: float = 0.1

    def __post_init__(self) -> None:
        for pid, ppid, name in ((SHELL, 0, "init"), (SERVEPACK, SHELL, "python3"), (ENGINE, SERVEPACK, "llama-server")):
            self.procs[pid] = ProcTick(ppid=ppid, ticks=0, start=1, name=name)

    def spawn(self, pid: int, ppid: int, name: str) -> None:
        self.procs[pid] = ProcTick(ppid=ppid, ticks=0, start=7, name=name)

    def step(self, seconds: float, cores: dict[int, float], *, hidden_cores: float = 0.0, steal_cores: float = 0.0
             ) -> None:
        """`cores`: pid → cores used; `hidden_cores`: used by processes that exited before the scan."""
        for pid, c in cores.items():
            p = self.procs[pid]
            self.procs[pid] = ProcTick(ppid=p.ppid, ticks=p.ticks + round(c * seconds * CLK_TCK), start=p.start,
                                       name=p.name)
        used = sum(cores.values()) + hidden_cores
        self.busy += round(used * seconds * CLK_TCK)
        self.steal += round(steal_cores * seconds * CLK_TCK)
        self.total += round(self.n * seconds * CLK_TCK)

    def cores(self) -> int:
        return self.n

    def cpu_times(self) -> CpuTimes | None:
        return CpuTimes(busy=self.busy, steal=self.steal, total=self.total)

    def processes(self) -> dict[int, ProcTick]:
        return dict(self.procs)

    def loadavg(self) -> float | None:
        return self.load

    def cpu_mhz(self) -> float | None:
        return self.mhz

    def throttle_count(self) -> int | None:
        return None

    def gpu_others_pct(self, exclude: set[int]) -> float | None:
        return None

    def unavailable(self) -> list[str]:
        return ["thermal throttle counters not exposed (test)"]


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr("servepack.host.contention.time.time", c)
    return c


def _watch(host: Scripted) -> ContentionWatch:
    return ContentionWatch(ExcludeSet([SERVEPACK]), reader=host)


def _run(host: Scripted, watch: ContentionWatch, clock: Clock, seconds: int, cores: dict[int, float],
         **kw: float) -> tuple[float, float]:
    t0 = clock.t
    for _ in range(seconds * 2):
        host.step(0.5, cores, **kw)
        clock.t += 0.5
        watch.tick()
    return t0, clock.t


def test_the_engine_busy_and_nobody_else_is_quiet(clock: Clock) -> None:
    host = Scripted()
    w = _watch(host)
    w.tick()
    t0, t1 = _run(host, w, clock, 4, {ENGINE: 2.0, SERVEPACK: 0.1, SHELL: 0.02})
    r = w.reading(t0, t1)
    assert not r.contended and r.reason is None
    assert r.own_cores == pytest.approx(2.1, abs=0.02)
    assert r.others_cores == pytest.approx(0.02, abs=0.02)


def test_another_process_holding_a_core_is_contended_and_named(clock: Clock) -> None:
    host = Scripted()
    host.spawn(HOG, SHELL, "stress-ng")
    w = _watch(host)
    w.tick()
    t0, t1 = _run(host, w, clock, 4, {ENGINE: 1.0, HOG: 1.0})
    r = w.reading(t0, t1)
    assert r.contended
    assert r.others_cores == pytest.approx(1.0, abs=0.02) and r.others_share == pytest.approx(0.5, abs=0.01)
    assert r.top == ["stress-ng (pid 500) 1.00 cores"]
    assert r.reason == "others held 1.00 of 2 cores (50%): stress-ng (pid 500) 1.00 cores"


def test_a_child_of_the_engine_is_not_others(clock: Clock) -> None:
    host = Scripted()
    host.spawn(777, ENGINE, "llama-worker")  # a helper process the engine started
    w = _watch(host)
    w.tick()
    t0, t1 = _run(host, w, clock, 2, {ENGINE: 1.0, 777: 1.0})
    assert not w.reading(t0, t1).contended


def test_processes_that_exit_between_scans_still_count(clock: Clock) -> None:
    # A compiler storm: many short processes, none alive at a scan; the host's busy time still shows them.
    host = Scripted()
    w = _watch(host)
    w.tick()
    t0, t1 = _run(host, w, clock, 3, {ENGINE: 1.0}, hidden_cores=0.8)
    r = w.reading(t0, t1)
    assert r.contended and r.others_cores == pytest.approx(0.8, abs=0.03) and r.top == []


def test_below_the_share_is_not_contended_at_it_is(clock: Clock) -> None:
    host = Scripted()
    host.spawn(HOG, SHELL, "cron")
    w = _watch(host)
    w.tick()
    a0, a1 = _run(host, w, clock, 2, {ENGINE: 1.0, HOG: 0.1})  # 5% of 2 cores
    b0, b1 = _run(host, w, clock, 2, {ENGINE: 1.0, HOG: 0.3})  # 15%
    assert not w.reading(a0, a1).contended
    assert w.reading(b0, b1).contended


def test_steal_alone_is_contended(clock: Clock) -> None:
    host = Scripted()
    w = _watch(host)
    w.tick()
    t0, t1 = _run(host, w, clock, 2, {ENGINE: 1.0}, steal_cores=0.4)
    r = w.reading(t0, t1)
    assert r.contended and r.reason is not None and "steal 20%" in r.reason


def test_windows_are_told_apart(clock: Clock) -> None:
    host = Scripted()
    host.spawn(HOG, SHELL, "pip")
    w = _watch(host)
    w.tick()
    q0, q1 = _run(host, w, clock, 3, {ENGINE: 1.0})
    h0, h1 = _run(host, w, clock, 3, {ENGINE: 1.0, HOG: 0.9})
    p0, p1 = _run(host, w, clock, 3, {ENGINE: 1.0})
    assert [w.reading(a, b).contended for a, b in ((q0, q1), (h0, h1), (p0, p1))] == [False, True, False]
    s = w.summary()
    assert (s.samples, s.samples_contended) == (3, 1)
    assert s.top == ["pip (pid 500) 0.90 cores"]
    assert s.cores == 2 and "10% of 2 logical cores" in s.policy
    assert s.unavailable == ["thermal throttle counters not exposed (test)"]


def test_a_reused_pid_is_a_new_process(clock: Clock) -> None:
    host = Scripted()
    host.spawn(HOG, SHELL, "old")
    host.step(0.5, {HOG: 1.0})
    w = _watch(host)
    w.tick()
    host.procs[HOG] = ProcTick(ppid=SHELL, ticks=0, start=99, name="new")  # old exited, pid reused
    t0, t1 = _run(host, w, clock, 2, {ENGINE: 1.0, HOG: 0.05})
    assert not w.reading(t0, t1).contended


def test_wait_quiet_reports_a_quiet_host_with_figures(clock: Clock) -> None:
    host = Scripted()
    w = _watch(host)
    w.tick()
    said: list[str] = []

    def sleep(s: float) -> None:
        host.step(s, {ENGINE: 0.01})
        clock.t += s

    check = w.wait_quiet(60, said.append, sleep=sleep)
    assert check.quiet and said and said[0].startswith("host quiet: others 0.00 of 2 cores, load 0.10")


def test_wait_quiet_waits_for_a_busy_host_and_says_who(clock: Clock) -> None:
    host = Scripted()
    host.spawn(HOG, SHELL, "cc1plus")
    w = _watch(host)
    w.tick()
    said: list[str] = []
    calls = [0]

    def sleep(s: float) -> None:
        calls[0] += 1
        host.step(s, {HOG: 1.5} if calls[0] <= 2 else {})
        clock.t += s

    check = w.wait_quiet(60, said.append, sleep=sleep)
    assert check.quiet and calls[0] == 3 and len(said) == 2  # busy twice (said once: every 10 s), then quiet
    assert said[0].startswith("host busy: others held 1.50 of 2 cores (75%): cc1plus (pid 500) 1.50 cores")
    assert "waiting for quiet" in said[0] and said[1].startswith("host quiet")


def test_wait_quiet_never_goes_on_silently(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    host = Scripted()
    host.spawn(HOG, SHELL, "pip")
    w = _watch(host)
    w.tick()
    said: list[str] = []

    def sleep(s: float) -> None:
        host.step(s, {HOG: 1.0})
        clock.t += s

    check = w.wait_quiet(0, said.append, sleep=sleep)
    assert not check.quiet and len(said) == 1
    assert said[0].startswith("WARNING host busy: others held 1.00 of 2 cores (50%): pip (pid 500)")
    assert "--wait-quiet" in said[0] and "marked contended" in said[0]


def test_policy_is_adjustable() -> None:
    p = ContentionPolicy(share=0.5)
    assert p.describe(4).startswith("others ≥ 50% of 4 logical cores (2.00 cores)")


@pytest.mark.parametrize(("text", "seconds"), [("60s", 60.0), ("60", 60.0), ("2m", 120.0), ("1.5m", 90.0),
                                               ("0", 0.0), ("500ms", 0.5), (" 10S ", 10.0)])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "error"), [("soon", "is not a duration"), ("-5s", "out of range"),
                                             ("2h", "out of range"), ("nan", "out of range"), ("", "not a duration")])
def test_bad_durations_are_refused(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_duration(text)


def test_the_real_reader_reads_this_host() -> None:
    r = ProcReader()
    cpu = r.cpu_times()
    procs = r.processes()
    assert cpu is not None and cpu.total > cpu.busy > 0
    import os

    assert os.getpid() in procs and procs[os.getpid()].ticks >= 0


class _NotFound(Exception):
    pass


class _FakeNvml:
    """pynvml's surface the reader uses: per-process SM utilisation samples since a timestamp."""

    NVMLError_NotFound = _NotFound

    def __init__(self, samples: list[list[tuple[int, int, int]]]) -> None:
        self.batches = samples  # per call: (pid, timestamp, smUtil)
        self.since: list[int] = []

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> object:
        return object()

    def nvmlDeviceGetProcessUtilization(self, handle: object, since: int) -> list[object]:
        self.since.append(since)
        batch = self.batches.pop(0)
        if not batch:
            raise _NotFound()

        class S:
            def __init__(self, pid: int, ts: int, sm: int) -> None:
                self.pid, self.timeStamp, self.smUtil = pid, ts, sm

        return [S(*x) for x in batch]


def test_gpu_use_by_other_processes_is_read_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    nv = _FakeNvml([[(ENGINE, 10, 95), (HOG, 11, 40)], [], [(ENGINE, 20, 90)]])
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    r = ProcReader()
    assert r.gpu_others_pct({SERVEPACK, ENGINE}) == 40.0  # the engine's own use is not others'
    assert r.gpu_others_pct({SERVEPACK, ENGINE}) == 0.0  # no sample since: nobody else
    assert r.gpu_others_pct({SERVEPACK, ENGINE}) == 0.0
    assert nv.since == [0, 11, 11]  # each call asks only for samples newer than the last one seen


def test_no_nvml_is_named_not_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    r = ProcReader()
    assert r.gpu_others_pct(set()) is None
    assert r.unavailable() == ["GPU use by others unknown: NVML unreadable, because nvidia-ml-py is not installed"]


def test_gpu_contention_is_contended(clock: Clock) -> None:
    host = Scripted()
    w = ContentionWatch(ExcludeSet([SERVEPACK]), reader=host)
    w.tick()
    host.gpu_others_pct = lambda exclude: 55.0  # type: ignore[method-assign]
    t0, t1 = _run(host, w, clock, 2, {ENGINE: 1.0})
    r = w.reading(t0, t1)
    assert r.contended and r.gpu_others_pct == 55.0
    assert r.reason == "other processes used the GPU at 55%"


class Blind(Scripted):
    """A host with no /proc: nothing can be read."""

    def cpu_times(self) -> CpuTimes | None:
        return None

    def processes(self) -> dict[int, ProcTick]:
        return {}


def test_a_host_without_cpu_accounting_is_not_watched_rather_than_quiet(clock: Clock) -> None:
    host = Blind()
    w = ContentionWatch(ExcludeSet([SERVEPACK]), reader=host)
    w.tick()
    t0, t1 = _run(host, w, clock, 2, {})
    r = w.reading(t0, t1)
    assert r.others_cores is None and not r.watched and not r.contended
