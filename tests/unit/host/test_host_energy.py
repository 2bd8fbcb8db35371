"""host.energy: joules over a window from RAPL (a fake powercap tree) and NVML; wraps, errors and absence recorded."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
from fake_pynvml import FakePynvml

from servepack.host import energy
from servepack.host.energy import Device, EnergyMeter, Source, Unread, nvml_source, rapl_source

MAX_UJ = 262_143_328_850  # a real package's max_energy_range_uj


def zone(root: Path, name: str, label: str, uj: int, max_uj: int | None = MAX_UJ) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{uj}\n")
    if max_uj is not None:
        (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def set_uj(z: Path, uj: int) -> None:
    (z / "energy_uj").write_text(f"{uj}\n")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_rapl_package_and_dram_are_summed_and_overlapping_zones_are_not(tmp_path: Path) -> None:
    pkg = zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    zone(tmp_path, "intel-rapl:0:0", "core", 5_000_000)  # inside the package: summing it would count twice
    dram = zone(tmp_path, "intel-rapl:0:1", "dram", 2_000_000)
    clock = Clock()
    m = EnergyMeter([rapl_source(tmp_path)], clock=clock)
    a = m.mark()
    set_uj(pkg, 31_000_000)
    set_uj(dram, 4_500_000)
    clock.t += 10
    w = m.window(a, m.mark(), output_tokens=1000)
    (rapl,) = w.meters
    assert [(d.device, d.joules) for d in rapl.devices] == [("intel-rapl:0 (package-0)", 30.0),
                                                            ("intel-rapl:0:1 (dram)", 2.5)]
    assert (rapl.joules, rapl.j_per_output_token, w.window_s, rapl.unreadable) == (32.5, 0.0325, 10.0, None)
    assert w.figure() == rapl


def test_a_wrapped_counter_gives_the_joules_spent_not_negative_or_huge(tmp_path: Path) -> None:
    pkg = zone(tmp_path, "intel-rapl:0", "package-0", MAX_UJ - 1_000_000)
    m = EnergyMeter([rapl_source(tmp_path)], clock=Clock())
    a = m.mark()
    set_uj(pkg, 500_000)  # wrapped past max_energy_range_uj: 1.0 J before the wrap, 0.5 J after, 1 µJ the step to 0
    w = m.window(a, m.mark(), output_tokens=10)
    assert w.meters[0].joules == pytest.approx(1.500001, abs=1e-6)
    assert w.meters[0].j_per_output_token == pytest.approx(0.15, abs=1e-6)


def test_wraps_between_polls_are_each_counted(tmp_path: Path) -> None:
    pkg = zone(tmp_path, "intel-rapl:0", "package-0", 0, max_uj=99_999_999)  # wraps every 100 J
    m = EnergyMeter([rapl_source(tmp_path)], clock=Clock())
    a = m.mark()
    for uj in (60_000_000, 20_000_000, 80_000_000, 40_000_000):  # +60, +60 (wrap), +60, +60 (wrap)
        set_uj(pkg, uj)
        m.poll()
    assert m.window(a, m.mark(), output_tokens=0).meters[0].joules == pytest.approx(240.0)
    assert m.window(a, m.mark(), output_tokens=0).meters[0].j_per_output_token is None  # no token: no ratio


def test_a_counter_that_goes_back_with_no_known_range_has_no_figure(tmp_path: Path) -> None:
    pkg = zone(tmp_path, "intel-rapl:0", "package-0", 9_000_000, max_uj=None)
    m = EnergyMeter([rapl_source(tmp_path)], clock=Clock())
    a = m.mark()
    set_uj(pkg, 1_000_000)
    got = m.window(a, m.mark(), output_tokens=5).meters[0]
    assert got.joules is None and got.j_per_output_token is None
    assert "counter went back by 8.000 J" in (got.unreadable or "")


def test_a_root_only_counter_is_recorded_unreadable_with_the_reason(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = zone(tmp_path, "intel-rapl:0", "package-0", 1)
    (pkg / "energy_uj").chmod(0o000)
    if os.geteuid() == 0:  # root reads a 0o000 file: refuse it the way the kernel refuses other users
        real = Path.read_text

        def refuse(self: Path, *a: object, **k: object) -> str:
            if self == pkg / "energy_uj":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *a, **k)  # type: ignore[arg-type]

        monkeypatch.setattr(Path, "read_text", refuse)
    m = EnergyMeter([rapl_source(tmp_path)], clock=Clock())
    got = m.window(m.mark(), m.mark(), output_tokens=100).meters[0]
    assert got.joules is None
    assert got.unreadable == (f"intel-rapl:0 (package-0): unreadable at the window's start: {pkg}/energy_uj: "
                              "permission denied (root-only since Linux 5.10, CVE-2020-8694)")


def test_no_powercap_is_recorded_absent(tmp_path: Path) -> None:
    src = rapl_source(tmp_path / "nothing")
    m = EnergyMeter([src], clock=Clock())
    got = m.window(m.mark(), m.mark(), output_tokens=3).meters[0]
    assert (got.meter, got.joules, got.devices) == ("rapl", None, [])
    assert got.unreadable == (f"RAPL absent: no {tmp_path}/nothing/intel-rapl:* (no RAPL on this CPU, or the "
                              "powercap driver is not loaded)")


class Flaky:
    """A counter that reads 10 J more each time, and fails while `broken` is set."""

    def __init__(self) -> None:
        self.j, self.broken = 0.0, False

    def __call__(self) -> float:
        if self.broken:
            raise Unread("GPU is lost")
        self.j += 10.0
        return self.j


def test_a_meter_that_errors_mid_window_is_unreadable_for_that_window_only() -> None:
    gpu, other = Flaky(), Flaky()
    m = EnergyMeter([Source("nvml", "GPU", [Device("GPU 0", gpu), Device("GPU 1", other)])], clock=Clock())
    a = m.mark()
    gpu.broken = True
    m.poll()  # the error happens between the window's ends
    gpu.broken = False
    b = m.mark()
    w = m.window(a, b, output_tokens=100).meters[0]
    assert w.joules is None and w.j_per_output_token is None  # never the sum of the GPUs that read
    assert w.devices[0].unreadable == "errored during the window: GPU is lost"
    assert w.devices[1].joules == 20.0  # the other GPU still has its figure
    assert w.unreadable == "GPU 0: errored during the window: GPU is lost"
    c = m.mark()
    after = m.window(b, c, output_tokens=100).meters[0]  # the next window, after it recovered, reads again
    assert (after.joules, after.j_per_output_token) == (20.0, 0.2)


def test_nvml_absent_is_recorded_with_the_reason(no_nvml: None) -> None:
    src = nvml_source()
    assert (src.devices, src.absent) == ([], "NVML unreadable, because nvidia-ml-py is not installed")
    m = EnergyMeter([src], clock=Clock())
    w = m.window(m.mark(), m.mark(), output_tokens=7)
    assert w.meters[0].unreadable == "NVML unreadable, because nvidia-ml-py is not installed"
    assert w.figure() is None
    assert w.sentence() == ("0.0 s, 7 output tokens; nvml: unreadable (NVML unreadable, because nvidia-ml-py is "
                            "not installed)")


def test_nvml_counter_is_read_per_gpu_in_joules(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = FakePynvml(gpus=2)
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    m = EnergyMeter([nvml_source()], clock=Clock())
    a = m.mark()
    lib.energy[0] += 150_000  # mJ
    lib.energy[1] += 50_500
    w = m.window(a, m.mark(), output_tokens=400).meters[0]
    assert [(d.device, d.joules) for d in w.devices] == [("GPU 0 (NVIDIA H200)", 150.0), ("GPU 1 (NVIDIA H200)", 50.5)]
    assert (w.joules, w.j_per_output_token) == (200.5, 0.50125)


def test_the_polling_thread_stops(tmp_path: Path) -> None:
    zone(tmp_path, "intel-rapl:0", "package-0", 1)
    with EnergyMeter([rapl_source(tmp_path)], poll_s=0.01):
        (t,) = [t for t in threading.enumerate() if t.name == "servepack-energy"]
        assert t.is_alive()
    assert not t.is_alive()
    assert energy.POLL_S <= 10.0


def test_a_failing_counter_does_not_end_the_polling(tmp_path: Path) -> None:
    # An error a source does not turn into Unread (a bug, a driver's surprise) is dropped in the thread: the meter
    # keeps polling the other devices rather than ending its thread and leaving every later window unmeasured.
    zone(tmp_path, "intel-rapl:0", "package-0", 1)
    calls = {"n": 0}

    def flaky() -> float:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("driver surprise")
        return float(calls["n"])

    src = Source("nvml", "GPU (scripted)", [Device("GPU 0", flaky)])
    with EnergyMeter([src], poll_s=0.01):
        deadline = time.monotonic() + 10
        while calls["n"] < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert calls["n"] >= 6
