"""The memory sampler's readings at ten a second (issue 32.6): one /proc/meminfo read for RAM and swap, each
process's RSS from /proc/PID/statm, and the descendants listed once a second, not at every reading."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from servepack.host.memory import TreeRss, host_memory, process_rss

MIB = 1 << 20
HOLD = "import sys, time; b = bytearray(96 << 20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); " \
       "time.sleep(60)"


def test_host_memory_gives_psutils_figures_from_one_read() -> None:
    available, swap_free, swap_total = host_memory()
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    assert swap_total == sw.total
    assert abs(swap_free - sw.free) <= 64 * MIB
    assert abs(available - vm.available) <= 256 * MIB  # other processes move it between the two reads
    assert 0 < available <= vm.total


def test_process_rss_is_the_statm_figure_and_none_for_a_gone_process() -> None:
    mine = process_rss(os.getpid())
    assert mine is not None and abs(mine - psutil.Process().memory_info().rss) <= 8 * MIB
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert process_rss(gone.pid) is None


def test_a_child_started_after_a_listing_counts_from_the_next_one() -> None:
    tree = TreeRss(refresh_s=0.5)
    root = os.getpid()
    before = tree.read(root)
    assert before is not None
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ok"  # its 96 MiB are resident
        stale = tree.read(root)  # listed < 0.5 s ago: the child is not in the list yet
        assert stale is not None and stale < before + 48 * MIB, (before, stale)
        time.sleep(0.55)
        fresh = tree.read(root)
        assert fresh is not None and fresh >= before + 80 * MIB, (before, fresh)
        me = psutil.Process(root)  # psutil's full scan agrees once the list is fresh
        full = sum(p.memory_info().rss for p in [me, *me.children(recursive=True)])
        assert abs(full - fresh) <= 16 * MIB, (full, fresh)
    finally:
        child.kill()
        child.wait()


def test_a_new_pid_is_listed_at_once_and_a_gone_root_reads_none() -> None:
    tree = TreeRss(refresh_s=3600)
    holder = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        assert tree.read(os.getpid()) is not None
        other = tree.read(holder.pid)  # a fresh server's pid: listed now, whatever refresh_s says
        assert other is not None and other >= 90 * MIB
    finally:
        holder.kill()
        holder.wait()
    assert tree.read(holder.pid) is None
