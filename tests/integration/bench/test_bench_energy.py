"""Joules per cell (bench) and per point (capacity) against the fake server, from a scripted meter and this host's."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from servepack.bench import runner
from servepack.bench.capacity import parse_slo
from servepack.bench.config import BenchSettings
from servepack.bench.load import LoadSettings
from servepack.bench.runner import run_bench
from servepack.bench.sweep import run_capacity
from servepack.engine.attach import attach
from servepack.host.energy import Device, EnergyMeter, Source, energy_note
from servepack.store import ResultsDir
from servepack.testing import Script, ScriptedServer

WATTS = 250.0


def gpu_at(watts: float) -> Device:
    """A GPU drawing a steady `watts`: its counter is watts × seconds on the meter's own clock."""
    return Device("GPU 0 (scripted)", lambda: watts * time.monotonic())


def meter() -> EnergyMeter:
    return EnergyMeter([Source("nvml", "GPU total-energy counter (scripted)", [gpu_at(WATTS)])])


def test_each_bench_cell_records_its_joules_and_joules_per_output_token(tmp_path: Path) -> None:
    settings = BenchSettings(context_marks=(40, 80), gen_tokens=12, samples=3, timeout_s=10.0)
    results = ResultsDir(tmp_path / "r")
    with ScriptedServer(Script(ttft_s=0.02, itl_s=0.01)) as srv, meter() as m:
        s = run_bench(attach(srv.base_url, "m"), settings, results, energy=m)
    assert [(e.context_tokens, e.concurrency) for e in s.energy] == [(40, 1), (80, 1)]
    reqs = [json.loads(x) for x in results.file("requests.jsonl").read_text().splitlines()]
    for e in s.energy:
        tokens = sum(r["generated_tokens"] or 0 for r in reqs if not r["warmup"] and r["context_tokens"] ==
                     e.context_tokens)
        assert e.energy.output_tokens == tokens == 3 * 12
        (gpu,) = e.energy.meters
        assert gpu.joules == pytest.approx(WATTS * e.energy.window_s, rel=0.05, abs=0.5)
        assert gpu.j_per_output_token == pytest.approx(gpu.joules / tokens, rel=1e-5)
        assert gpu.j_per_output_token < WATTS * e.energy.window_s  # per token, not the window's whole energy
        assert e.energy.window_s < s.wall_s
    doc = json.loads(results.file("server_bench.json").read_text())
    assert doc["energy"][0]["energy"]["meters"][0]["meter"] == "nvml"
    note = energy_note([e.energy for e in s.energy], "cells")
    assert note.startswith("energy: nvml [GPU 0 (scripted)] ") and "J over 2 cells" in note


def test_this_hosts_meters_are_recorded_even_when_absent(tmp_path: Path) -> None:
    settings = BenchSettings(context_marks=(40,), gen_tokens=8, samples=2, timeout_s=10.0)
    with ScriptedServer(Script(ttft_s=0.01, itl_s=0.005)) as srv:
        s = run_bench(attach(srv.base_url, "m"), settings, ResultsDir(tmp_path / "r"))
    (cell,) = s.energy
    assert [m.meter for m in cell.energy.meters] == ["nvml", "rapl"]
    for m in cell.energy.meters:  # each either has its figure or says why not: never a silent zero
        assert (m.joules is None) == bool(m.unreadable)
        if m.joules is None:
            assert m.j_per_output_token is None


def test_each_capacity_point_records_its_joules(tmp_path: Path) -> None:
    results = ResultsDir(tmp_path / "r")
    settings = LoadSettings(prompt_tokens=30, gen_tokens=8, max_requests=6, duration_s=20.0, timeout_s=10.0)
    with ScriptedServer(Script(queue=True, slots=2, ttft_s=0.02, itl_s=0.01)) as srv, meter() as m:
        r = run_capacity(attach(srv.base_url, "m"), settings, [parse_slo("ttft_p90=1s")], results, max_level=2,
                         knee_probe=False, energy=m)
    assert [(e.point, e.level) for e in r.energy] == [(p.index, p.level) for p in r.points]
    reqs = [json.loads(x) for x in results.file("capacity_requests.jsonl").read_text().splitlines()]
    for e in r.energy:
        tokens = sum(q["generated_tokens"] or 0 for q in reqs if q["point"] == e.point)
        (gpu,) = e.energy.meters
        assert e.energy.output_tokens == tokens > 0
        assert gpu.joules == pytest.approx(WATTS * e.energy.window_s, rel=0.05, abs=0.5)
        assert gpu.j_per_output_token == pytest.approx(gpu.joules / tokens, rel=1e-5)
    assert json.loads(results.file("capacity.json").read_text())["energy"][0]["point"] == 0



def test_a_cpu_meter_that_fails_to_start_leaves_no_energy_thread(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    # bench starts its own energy meter (none given), then the observer's CPU meter; when the second cannot start,
    # the first is stopped too (it was started before the try that stops it, and its polling thread outlived bench).
    def broken_start(self: object) -> object:
        raise OSError("no /proc here")

    monkeypatch.setattr(runner, "EnergyMeter", lambda: EnergyMeter(
        [Source("nvml", "GPU total-energy counter (scripted)", [gpu_at(WATTS)])], poll_s=0.01))
    monkeypatch.setattr(runner.CpuMeter, "start", broken_start)
    settings = BenchSettings(context_marks=(40,), gen_tokens=4, samples=2, timeout_s=10.0)
    with ScriptedServer(Script(ttft_s=0.01, itl_s=0.005)) as srv, pytest.raises(OSError, match="no /proc here"):
        run_bench(attach(srv.base_url, "m"), settings, ResultsDir(tmp_path / "r"))
    assert [t for t in threading.enumerate() if t.name == "servepack-energy"] == []
