"""What the machine did during each point (PointWatch), from scripted meters: a GPU lost mid-run, a meter that
errors, a host with no GPU. The point it touched is marked unreadable with the reason; the others are kept."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest

from servepack.bench.observer import PointEvidence, PointWatch
from servepack.host.contention import CpuTimes
from servepack.host.nvml import Unreadable, Utilisation
from servepack.host.threads import ThreadReader, ThreadTick

LOST = Unreadable("NVML GPU 0 utilisation unreadable, because NVMLError_GpuIsLost")


class Gpu:
    """Two devices; `lost` makes device 0 unreadable, `raises` makes the call itself fail."""

    def __init__(self, sm: float = 80.0) -> None:
        self.sm, self.lost, self.raises, self.calls = sm, False, False, 0

    def __call__(self) -> list[Utilisation | Unreadable] | Unreadable:
        self.calls += 1
        if self.raises:
            raise RuntimeError("driver went away")
        return [LOST if self.lost else Utilisation(gpu_pct=self.sm, memory_pct=30.0),
                Utilisation(gpu_pct=10.0, memory_pct=5.0)]


class Host:
    """/proc/stat that advances 100 jiffies a reading, `busy` of them busy; `fail` raises once."""

    def __init__(self) -> None:
        self.busy, self.total, self.fail = 0, 0, False

    def __call__(self) -> CpuTimes | None:
        if self.fail:
            self.fail = False
            raise OSError("/proc/stat: input/output error")
        self.busy += 60
        self.total += 100
        return CpuTimes(busy=self.busy, steal=0, total=self.total)


class Threads(ThreadReader):
    """One server thread that gains `rate` jiffies a reading, and one idle thread."""

    def __init__(self) -> None:
        self.ticks = 0

    def tree(self, roots: Iterable[int]) -> list[int]:
        return list(roots)

    def threads(self, pids: Iterable[int]) -> dict[tuple[int, int], ThreadTick]:
        self.ticks += 10
        return {(4242, 1): ThreadTick(pid=4242, tid=4242, name="srv", ticks=self.ticks, start=1),
                (4243, 1): ThreadTick(pid=4242, tid=4243, name="http", ticks=0, start=1)}


def _point(watch: PointWatch, readings: int = 3) -> PointEvidence:
    t0 = time.time()
    for _ in range(readings):
        time.sleep(0.01)
        watch.tick()
    time.sleep(0.01)
    return watch.window(t0, time.time())


def test_figures_per_point_and_a_gpu_lost_mid_run_marks_only_that_point() -> None:
    gpu, host = Gpu(), Host()
    watch = PointWatch([4242], gpu=gpu, threads=Threads(), host=host, cores=4)
    watch.tick()  # the sweep's first reading, before its first point
    first = _point(watch)
    assert first.gpu_state == "measured" and first.gpu_sm_pct == 80.0 and first.gpu_mem_bw_pct == 30.0
    assert [(g.index, g.sm_pct) for g in first.gpus] == [(0, 80.0), (1, 10.0)]
    assert first.host_cpu_pct == 60.0 and first.host_steal_pct == 0.0 and first.host_cores == 4
    assert first.server_thread == "srv (pid 4242, tid 4242)" and first.server_thread_pct is not None
    assert first.server_thread_pct > 0 and first.server_threads == 2 and first.samples >= 3
    gpu.lost = True
    second = _point(watch)
    assert second.gpu_state == "unreadable" and second.gpu_sm_pct is None and second.gpus == []
    assert second.gpu_note is not None and "GpuIsLost" in second.gpu_note
    assert second.host_cpu_pct == 60.0 and second.server_thread_pct is not None  # the rest of the point is kept
    gpu.lost = False
    third = _point(watch)
    assert third.gpu_state == "measured" and third.gpu_sm_pct == 80.0  # back for the next point


def test_a_meter_that_raises_is_unreadable_for_the_points_it_touched() -> None:
    gpu, host = Gpu(), Host()
    watch = PointWatch([4242], gpu=gpu, threads=Threads(), host=host, cores=2)
    watch.tick()
    gpu.raises = True
    bad = _point(watch)
    assert bad.gpu_state == "unreadable" and bad.gpu_note is not None
    assert "RuntimeError: driver went away" in bad.gpu_note
    gpu.raises = False
    # one failed /proc/stat reading inside a point: the figure comes from the readings around it, and says so
    t0 = time.time()
    watch.tick()
    host.fail = True
    watch.tick()
    time.sleep(0.01)
    ev = watch.window(t0, time.time())
    assert ev.host_cpu_pct == 60.0 and ev.host_note is not None
    assert ev.host_note.startswith("1 of ") and "OSError: /proc/stat: input/output error" in ev.host_note
    # a point whose every reading failed has no host figure, with the reason; the next point has one again
    host.fail, t0 = True, time.time()
    watch.tick()
    failing = watch.window(t0, t0)  # its only reading is the failed one
    assert failing.host_cpu_pct is None and failing.host_note is not None
    assert _point(watch).host_cpu_pct == 60.0


def test_no_gpu_meter_is_absent_for_the_sweep_and_never_an_idle_gpu() -> None:
    gpu = Gpu()
    watch = PointWatch([4242], gpu=lambda: Unreadable("NVML unreadable, because nvidia-ml-py is not installed"),
                       threads=Threads(), host=Host(), cores=2)
    watch.tick()
    ev = _point(watch)
    assert ev.gpu_state == "absent" and ev.gpu_sm_pct is None and ev.gpu_sm_pct != 0.0
    assert ev.gpu_note == "NVML unreadable, because nvidia-ml-py is not installed"
    none = PointWatch([4242], gpu=lambda: [], threads=Threads(), host=Host())
    none.tick()
    assert _point(none).gpu_note == "NVML sees no GPU"
    assert gpu.calls == 0


def test_an_unknown_server_process_is_said_so() -> None:
    import os

    for pids in ([], [os.getpid()]):  # none known, or the server in this very process (a test's fake in a thread)
        watch = PointWatch(pids, gpu=Gpu(), threads=Threads(), host=Host())
        watch.tick()
        ev = _point(watch)
        assert ev.server_thread_pct is None and ev.server_note == "the server's processes are not known on this host"


def test_the_thread_reads_on_its_own_and_stops() -> None:
    gpu = Gpu()
    with PointWatch([4242], gpu=gpu, threads=Threads(), host=Host(), interval_s=0.02) as watch:
        t0 = time.time()
        time.sleep(0.2)
        ev = watch.window(t0, time.time())
    calls = gpu.calls
    time.sleep(0.1)
    assert gpu.calls == calls  # stopped
    assert ev.samples >= 3 and ev.gpu_sm_pct == pytest.approx(80.0)


def test_the_thread_and_host_meters_share_one_reader_and_keep_their_own_notes() -> None:
    """Both counter meters go through one reader (_counter_figures): each gets its own figures and its own note for
    a failed reading, a window with fewer than two readings, and a counter that did not move."""
    from servepack.bench.observer import _HOST_METER, _THREAD_METER, _counter_figures, _Reading

    def tick(ticks: int) -> dict[tuple[int, int], ThreadTick]:
        return {(4242, 1): ThreadTick(pid=4242, tid=4242, name="srv", ticks=ticks, start=1)}

    def reading(t: float, busy: int | str, ticks: int | str) -> _Reading:
        cpu = busy if isinstance(busy, str) else CpuTimes(busy=busy, steal=10 * int(t), total=100 * int(t))
        return _Reading(t=t, cpu=cpu, threads=ticks if isinstance(ticks, str) else tick(ticks), gpu=None)

    good = [reading(1.0, 0, 0), reading(2.0, "stat broke", "tid gone"), reading(3.0, 120, 100)]
    host = _counter_figures(good, good[0], good[-1], good[1:], _HOST_METER)
    assert host == {"host_cpu_pct": 60.0, "host_steal_pct": 10.0, "host_note": "1 of 3 readings failed (stat broke)"}
    threads = _counter_figures(good, good[0], good[-1], good[1:], _THREAD_METER)
    assert threads["server_note"] == "1 of 3 readings failed (tid gone)" and threads["server_threads"] == 1
    assert threads["server_thread"] == "srv (pid 4242, tid 4242)" and "host_note" not in threads
    assert "host_cpu_pct" not in threads and "server_thread_pct" not in host  # each meter writes only its own
    # only one usable reading in the window: the failures, else "fewer than two"
    one = [reading(1.0, 0, 0), reading(2.0, "stat broke", "tid gone")]
    assert _counter_figures(one, one[0], one[1], one[1:], _HOST_METER) == {
        "host_note": "1 of 2 readings failed (stat broke)"}
    assert _counter_figures(one, one[0], one[1], one[1:], _THREAD_METER) == {
        "server_note": "1 of 2 readings failed (tid gone)"}
    assert _counter_figures(one[:1], one[0], one[0], [], _HOST_METER) == {
        "host_note": "fewer than two /proc/stat readings in the point"}
    assert _counter_figures(one[:1], one[0], one[0], [], _THREAD_METER) == {
        "server_note": "fewer than two thread readings in the point"}
    # a counter that did not move, or a thread set that is empty at the end: that meter's own words
    still = [_Reading(t=1.0, cpu=CpuTimes(busy=5, steal=0, total=100), threads={}, gpu=None),
             _Reading(t=2.0, cpu=CpuTimes(busy=5, steal=0, total=100), threads={}, gpu=None)]
    assert _counter_figures(still, still[0], still[1], still[1:], _HOST_METER) == {
        "host_note": "/proc/stat did not advance over the point"}
    assert _counter_figures(still, still[0], still[1], still[1:], _THREAD_METER) == {
        "server_note": "no thread readable at the point's end"}


def test_periodic_readings_read_the_threads_every_nth_and_a_point_end_always() -> None:
    """A server's threads cost two /proc reads each: the thread's own readings take them on every `threads_every`-th
    (the first included), `tick()` (before a point) and `window` (its end) always; the figures come from those."""
    class Walked(Threads):
        walks = 0

        def tree(self, roots: Iterable[int]) -> list[int]:
            self.walks += 1
            return super().tree(roots)

    threads, host = Walked(), Host()
    watch = PointWatch([4242], gpu=Gpu(), threads=threads, host=host, cores=2, threads_every=3)
    watch.tick()  # the sweep's reading before the point
    t0 = time.time()
    time.sleep(0.01)
    for _ in range(7):  # periodic readings 0..6: the threads at 0, 3 and 6
        watch._periodic()
    assert threads.ticks == 10 * (1 + 3)
    assert threads.ticks != 10 * (1 + 7)  # not every reading
    time.sleep(0.01)
    t1 = time.time()
    watch._periodic()  # a reading after the point's end that skipped the threads: window must read them itself
    assert threads.ticks == 10 * 4
    ev = watch.window(t0, t1)
    assert threads.ticks == 10 * 5  # window's own reading, since none at or after t1 had the threads
    # the busiest thread gained 10 jiffies per thread reading, 4 readings apart (before the point → window's)
    assert ev.server_thread == "srv (pid 4242, tid 4242)" and ev.server_threads == 2 and ev.server_note is None
    assert ev.server_thread_pct is not None and ev.server_thread_pct > 0
    assert ev.host_cpu_pct == 60.0 and ev.host_note is None  # the host is read at every reading, as before
    # the GPU and host window ends at the first reading at or after t1 (the periodic one): 7 + 1 readings
    assert ev.samples == 8
    # a reading with the threads at or after the end already there: no extra reading
    ev2 = watch.window(t0, t1)
    assert threads.ticks == 10 * 5 and ev2.server_thread_pct == ev.server_thread_pct
    # the process tree is walked at the 1st, 3rd and 5th of the 5 thread readings (tree_every=2), not at every one
    assert threads.walks == 3 and threads.walks != 5
