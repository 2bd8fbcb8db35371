"""The busiest thread of a process tree, from a scratch /proc: the figure that names a single-threaded server."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from servepack.host.contention import CLK_TCK
from servepack.host.threads import ThreadReader, ThreadTick, parse_stat, thread_use


def _stat(pid: int, name: str, ppid: int, ticks: tuple[int, int], start: int) -> str:
    # fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice threads itrealvalue starttime
    rest = ["S", str(ppid)] + ["0"] * 9 + [str(ticks[0]), str(ticks[1])] + ["0"] * 6 + [str(start)] + ["0"] * 10
    return f"{pid} ({name}) " + " ".join(rest) + "\n"


def _proc(root: Path, pid: int, ppid: int, name: str, threads: dict[int, tuple[str, int, int | None]],
          start: int = 50) -> None:
    """A process and its threads: tid → (name, utime ticks, schedstat wait ns or None)."""
    d = root / str(pid)
    (d / "task").mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(_stat(pid, name, ppid, (sum(t[1] for t in threads.values()), 0), start))
    for tid, (tname, ticks, wait) in threads.items():
        t = d / "task" / str(tid)
        t.mkdir(exist_ok=True)
        (t / "stat").write_text(_stat(tid, tname, ppid, (ticks, 0), start + (tid - pid)))
        if wait is not None:
            (t / "schedstat").write_text(f"{ticks * 10_000_000} {wait} 5\n")


def test_parse_stat_takes_a_name_with_spaces_and_parens() -> None:
    line = _stat(7, "llama (server) x", 1, (120, 30), 999).encode()
    assert parse_stat(line) == ("llama (server) x", 150, 999)
    assert parse_stat(b"7 (cut") is None


def test_the_busiest_thread_of_the_tree_not_the_process_total(tmp_path: Path) -> None:
    # llama-server (pid 10): its main thread busy, 3 HTTP threads nearly idle; a child (pid 20) with one thread
    _proc(tmp_path, 10, 1, "llama-server", {10: ("llama-server", 0, 0), 11: ("http", 0, 0), 12: ("http", 0, 0),
                                            13: ("http", 0, 0)})
    _proc(tmp_path, 20, 10, "helper", {20: ("helper", 0, 0)})
    _proc(tmp_path, 30, 1, "stranger", {30: ("stranger", 0, 0)})  # not in the tree
    reader = ThreadReader(tmp_path)
    pids = reader.tree([10])
    assert pids == [10, 20]
    before = reader.threads(pids)
    assert len(before) == 5 and all(isinstance(t, ThreadTick) for t in before.values())
    span = 2.0
    busy = int(0.93 * span * CLK_TCK)  # 93% of one core over 2 s
    _proc(tmp_path, 10, 1, "llama-server", {10: ("llama-server", busy, int(0.02 * span * 1e9)),
                                            11: ("http", 2, 0), 12: ("http", 4, 0), 13: ("http", 0, 0)})
    _proc(tmp_path, 20, 10, "helper", {20: ("helper", 10, 0)})
    _proc(tmp_path, 30, 1, "stranger", {30: ("stranger", 400, 0)})
    use = thread_use(before, reader.threads(pids), span)
    assert use is not None
    assert use.busiest == "llama-server (pid 10, tid 10)"
    assert use.busiest_pct == pytest.approx(93.0, abs=0.6)
    assert use.busiest_wait_pct == pytest.approx(2.0)
    # the tree's total is the sum (the stranger's 400 ticks are not in it), and it is not the busiest figure
    assert use.tree_cores == pytest.approx((busy + 16) / CLK_TCK / span, abs=1e-3)
    assert use.busiest_pct != pytest.approx(100 * use.tree_cores)
    assert use.threads == 5


def test_a_new_thread_counts_whole_and_a_reused_tid_is_a_new_thread() -> None:
    old = {(5, 100): ThreadTick(pid=1, tid=5, name="a", ticks=500, start=100)}
    # tid 5 exited and a new thread got the same tid with a later start: its 30 ticks are all new, never 30 − 500
    new = {(5, 900): ThreadTick(pid=1, tid=5, name="b", ticks=30, start=900)}
    use = thread_use(old, new, 1.0, hz=100)
    assert use is not None and use.busiest_pct == 30.0 and use.busiest.startswith("b ")
    assert use.busiest_wait_pct is None and use.tree_wait_cores is None  # no schedstat: not known, not zero
    assert thread_use(old, {}, 1.0) is None and thread_use(old, new, 0.0) is None


def test_the_real_proc_sees_this_process_busy_thread() -> None:
    if not Path(f"/proc/{os.getpid()}/task").is_dir():
        pytest.skip("no /proc task directory here")
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    reader = ThreadReader()
    before = reader.threads([os.getpid()])
    t = threading.Thread(target=spin, name="spinner")
    t0 = time.monotonic()
    t.start()
    try:
        time.sleep(0.5)
        after = reader.threads([os.getpid()])  # while the spinner still runs
        span = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
    use = thread_use(before, after, span)
    assert use is not None and use.threads >= 2
    # the spinner holds the GIL most of the time; running plus waiting for a core is most of the window
    assert use.busiest_pct + (use.busiest_wait_pct or 0.0) > 20.0, use
