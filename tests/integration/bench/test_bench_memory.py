"""The memory sampler on a real child process, its rate, and a guard that stops a bench cell."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from servepack.bench.config import BenchSettings
from servepack.bench.runner import run_bench
from servepack.engine.attach import attach
from servepack.host.memory import MemorySampler
from servepack.packs.schema import Guards
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer


def test_sampler_rate_tree_rss_and_marks(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"])
    try:
        writer = ResultsDir(tmp_path / "r").jsonl("memory.jsonl")
        with MemorySampler(None, writer) as sampler:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and sampler.summary().samples < 3:
                time.sleep(0.05)
            sampler.set_pid(child.pid)
            start = sampler.summary().samples
            t0 = time.monotonic()
            time.sleep(1.0)
            sampler.mark("model_loaded")
            rate = (sampler.summary().samples - start) / (time.monotonic() - t0)
        s = sampler.summary()
    finally:
        child.kill()
        child.wait()
    # Behaviour, not this host's speed (benchmarks/memory_sampler.py prints the achieved rate on a quiet host): it
    # keeps sampling through the window, and never faster than its grid of deadlines (a busy loop would give
    # thousands; the +3 are the first sample, the mark's own and one at the stop).
    assert rate >= 3, rate
    assert s.samples <= s.duration_s / s.interval_s + 3, (s.samples, s.duration_s)
    assert s.peak_server_rss_bytes is not None and s.peak_server_rss_bytes > 60 << 20
    assert s.host_available_before_load_bytes and s.host_available_after_load_bytes
    assert s.marks[0]["label"] == "model_loaded" and not s.guard_events
    assert s.gpu_peak_used_bytes is not None or s.gpu_unavailable_reason
    lines = [json.loads(ln) for ln in (tmp_path / "r" / "memory.jsonl").read_text().splitlines()]
    assert len(lines) == s.samples and lines[0]["server_rss_bytes"] is None


def test_guard_stops_the_cell(tmp_path: Path) -> None:
    guards = Guards(min_available_ram_gb=1e6)  # more than any host has: trips on the first sample
    settings = BenchSettings(context_marks=(50, 80), gen_tokens=200, samples=3, timeout_s=10.0)
    with ScriptedServer(Script(ttft_s=0.05, itl_s=0.01)) as srv, MemorySampler(None, guards=guards) as sampler:
        s = run_bench(attach(srv.base_url, "m"), settings, ResultsDir(tmp_path / "r"), sampler=sampler)
    assert s.guard_event is not None and s.guard_event.guard == "min_available_ram_gb"
    assert s.status == "partial" and s.stopped_reason and "min_available_ram_gb" in s.stopped_reason
    assert len(s.cells) == 1 and s.cells[0].stopped and s.cells[0].n == 1
    assert "stopped by guard" in s.cells[0].failures[0]
    assert s.memory is not None and s.memory.guard_events
