"""CPU time of every thread of a process tree (/proc/<pid>/task/<tid>/stat), and the busiest one over a window.

A process's total CPU hides a single-threaded bottleneck: llama-server at 1.1 cores may be one thread pegged at a
core and forty idle. Two snapshots of the tree's threads, taken at a window's ends, give each thread's share of one
core over it; threads are keyed by (tid, start time) so a reused tid is never subtracted from another thread.
Where the kernel keeps scheduler statistics (/proc/.../schedstat), the time the busiest thread spent runnable but
waiting for a core is read too: on a busy host a thread that never sleeps may get only part of a core.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from servepack.host.contention import CLK_TCK, ProcReader, descendants


@dataclass(frozen=True)
class ThreadTick:
    pid: int
    tid: int
    name: str
    ticks: int  # utime + stime, jiffies
    start: int  # starttime, jiffies after boot
    wait_ns: int | None = None  # runnable but waiting for a core (schedstat's second field); None: not kept


@dataclass(frozen=True)
class ThreadUse:
    """The tree's threads over one window."""

    busiest_pct: float  # the busiest thread, % of one core
    busiest_wait_pct: float | None  # the same thread runnable but waiting for a core, % of the window
    busiest: str  # "name (pid P, tid T)"
    threads: int  # threads seen at either end
    tree_cores: float  # every thread together, cores
    tree_wait_cores: float | None  # every thread's runnable-but-waiting time together, cores (None: no schedstat)


def parse_stat(data: bytes) -> tuple[str, int, int] | None:
    """(name, utime + stime, starttime) from a /proc .../stat line; None when it is cut short."""
    left, right = data.find(b"("), data.rfind(b")")
    fields = data[right + 2:].split()
    if left < 0 or right < 0 or len(fields) < 20:
        return None
    return (data[left + 1:right].decode("utf-8", errors="replace"), int(fields[11]) + int(fields[12]),
            int(fields[19]))


def read_proc(path: str, size: int = 4096) -> bytes | None:
    """A small /proc file's bytes (up to `size`), or None when it is gone (os.open and one read: no pathlib or
    buffering, since a watch reads two files for each of a server's hundred-odd threads every few seconds, and the
    memory sampler reads /proc ten times a second)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _wait_ns(data: bytes | None) -> int | None:
    if data is None:
        return None
    try:
        return int(data.split()[1])
    except (IndexError, ValueError):
        return None


class ThreadReader:
    """Reads /proc (a scratch directory in tests)."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self._procs = ProcReader(proc)

    def tree(self, roots: Iterable[int]) -> list[int]:
        """The roots and their descendants now (a root that has exited is left out)."""
        procs = self._procs.processes()
        return sorted(p for p in descendants(roots, procs) if p in procs)

    def threads(self, pids: Iterable[int]) -> dict[tuple[int, int], ThreadTick]:
        """Every readable thread of `pids`; a process or thread that exits meanwhile is skipped."""
        out: dict[tuple[int, int], ThreadTick] = {}
        for pid in pids:
            task = f"{self.proc}/{pid}/task"
            try:
                tids = os.listdir(task)
            except OSError:
                continue
            for name in tids:
                if not name.isdigit():
                    continue
                data = read_proc(f"{task}/{name}/stat")
                parsed = parse_stat(data) if data is not None else None
                if parsed is None:
                    continue
                comm, ticks, start = parsed
                tid = int(name)
                out[(tid, start)] = ThreadTick(pid=pid, tid=tid, name=comm, ticks=ticks, start=start,
                                               wait_ns=_wait_ns(read_proc(f"{task}/{name}/schedstat")))
        return out


def thread_use(before: dict[tuple[int, int], ThreadTick], after: dict[tuple[int, int], ThreadTick],
               span_s: float, hz: int = CLK_TCK) -> ThreadUse | None:
    """Each thread's CPU between two snapshots `span_s` apart; a thread born in between counts all its time.
    None when there is no span or no thread at the end."""
    if span_s <= 0 or not after:
        return None
    deltas = {k: t.ticks - (before[k].ticks if k in before else 0) for k, t in after.items()}
    key = max(deltas, key=lambda k: (deltas[k], -k[0]))
    top = after[key]
    first = before.get(key)
    wait = None
    if top.wait_ns is not None and (first is None or first.wait_ns is not None):
        base = first.wait_ns if first is not None and first.wait_ns is not None else 0
        wait = round(100 * max(top.wait_ns - base, 0) / 1e9 / span_s, 1)
    waits = [t.wait_ns - ((before[k].wait_ns or 0) if k in before else 0) for k, t in after.items()
             if t.wait_ns is not None]
    tree_wait = round(sum(max(w, 0) for w in waits) / 1e9 / span_s, 3) if len(waits) == len(after) else None
    return ThreadUse(busiest_pct=round(100 * max(deltas[key], 0) / hz / span_s, 1), busiest_wait_pct=wait,
                     busiest=f"{top.name} (pid {top.pid}, tid {top.tid})", threads=len(set(before) | set(after)),
                     tree_cores=round(sum(max(d, 0) for d in deltas.values()) / hz / span_s, 3),
                     tree_wait_cores=tree_wait)
