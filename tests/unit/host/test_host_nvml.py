"""host.nvml: every failure is a typed Unreadable with the reason, never an exception and never a guess."""

from __future__ import annotations

import sys

import pytest
from fake_pynvml import FakePynvml, NVMLError_DriverNotLoaded

from servepack.host import nvml
from servepack.host.fingerprint import nvml_gpus


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakePynvml:
    lib = FakePynvml()
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    return lib


def test_readings_come_back_as_values(fake: FakePynvml) -> None:
    assert nvml.device_count() == 2
    assert nvml.energy_mj(1) == 2_000_000
    assert nvml.utilisation(1) == nvml.Utilisation(gpu_pct=14.0, memory_pct=41.0)
    assert nvml.memory(0) == nvml.Memory(total_bytes=141 << 30, used_bytes=7 << 30)
    nv = nvml.nvml()
    assert not isinstance(nv, nvml.Unreadable)
    assert nv.name(0) == "NVIDIA H200" and nv.cuda_driver_version() == "12.8"
    assert nv.process_utilisation(0, 0) == [nvml.ProcessSample(pid=7, timestamp_us=50, sm_pct=88.0)]
    assert nv.process_utilisation(0, 50) == []  # NVML's NotFound: nothing sampled since, not an error


def test_init_happens_once_per_library(fake: FakePynvml) -> None:
    for _ in range(5):
        nvml.energy_mj(0)
        nvml.device_count()
    assert fake.inits == 1


def test_a_gpu_lost_mid_run_is_unreadable_with_the_reason(fake: FakePynvml) -> None:
    assert nvml.energy_mj(0) == 1_000_000
    fake.lost.add(0)
    got = nvml.energy_mj(0)
    assert got == nvml.Unreadable("NVML GPU 0 total energy counter unreadable, because "
                                  "NVMLError_GpuIsLost: GPU is lost")
    assert nvml.energy_mj(1) == 2_000_000  # the other GPU still reads


def test_an_unsupported_counter_is_unreadable_not_zero(fake: FakePynvml) -> None:
    fake.no_energy.add(1)
    got = nvml.energy_mj(1)
    assert isinstance(got, nvml.Unreadable) and "NotSupported: Not Supported" in got.reason
    assert got != 0


def test_no_library_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert nvml.device_count() == nvml.Unreadable("NVML unreadable, because nvidia-ml-py is not installed")
    assert nvml.energy_mj(0) == nvml.Unreadable("NVML unreadable, because nvidia-ml-py is not installed")
    assert nvml_gpus() == ([], None, None, "NVML unreadable, because nvidia-ml-py is not installed")


def test_a_driver_that_is_not_loaded_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(init_error=NVMLError_DriverNotLoaded()))
    assert nvml.utilisation(0) == nvml.Unreadable(
        "NVML unreadable, because NVMLError_DriverNotLoaded: Driver Not Loaded")


def test_fingerprint_reads_through_the_wrapper(fake: FakePynvml) -> None:
    gpus, driver, cuda, state = nvml_gpus()
    assert (driver, cuda, state) == ("570.1", "12.8", "ok")
    assert [(g.index, g.name, g.uuid, g.memory_total_bytes) for g in gpus] == [
        (0, "NVIDIA H200", "GPU-0", 141 << 30), (1, "NVIDIA H200", "GPU-1", 141 << 30)]
