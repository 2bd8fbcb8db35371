from __future__ import annotations

from servepack.host.fingerprint import GpuFacts, HostFingerprint, detected_hardware_id, match_target
from servepack.packs import load_pack


def _host(gpu: str | None = None, arch: str = "x86_64", ram_gib: float = 24, mem: int | None = None) -> HostFingerprint:
    gpus = [GpuFacts(index=0, name=gpu, uuid="GPU-1", memory_total_bytes=mem)] if gpu else []
    return HostFingerprint(hostname="h", cpu_model="AMD EPYC 9654 96-Core Processor", cpu_arch=arch,
                           cpu_cores_logical=2, cpu_cores_physical=1, ram_total_bytes=int(ram_gib * 1024**3),
                           os="Debian", kernel="6", python="3.11", gpus=gpus, gpu_driver=None,
                           cuda_driver_version=None, nvml="ok" if gpu else "none")


def test_spark_target_needs_gb10() -> None:
    target = load_pack("laguna-s-2.1-dgx-spark").pack.hardware
    ok, failed = match_target(_host(), target)
    assert ok is False
    assert any("GPU name" in f and "no GPU" in f for f in failed)
    assert any("CPU arch x86_64" in f for f in failed)
    h200 = _host("NVIDIA H200", ram_gib=2000, mem=150_000_000_000)
    ok, failed = match_target(h200, target)
    assert ok is False and any("NVIDIA H200" in f for f in failed)
    spark = _host("NVIDIA GB10", arch="aarch64", ram_gib=121)
    assert match_target(spark, target) == (True, [])


def test_detected_ids_never_borrow_the_pack() -> None:
    assert detected_hardware_id(_host()) == "cpu-amd-epyc-9654-96-core-2c-24gb"
    assert detected_hardware_id(_host("NVIDIA H200", mem=150_754_820_096)) == "nvidia-h200-140gb"
    assert detected_hardware_id(_host("NVIDIA GB10", arch="aarch64")) == "dgx-spark-gb10-128gb"


def test_embedded_target_matches_any_cpu() -> None:
    target = load_pack(None).pack.hardware
    assert match_target(_host(), target)[0] is True
    assert match_target(_host(arch="riscv64"), target)[0] is False


def test_generic_target_never_replaces_the_detected_id() -> None:
    from servepack.packs import load_pack as load
    from servepack.records.policy import attribution

    loaded = load(None)
    for host in (_host(), _host("NVIDIA H200", mem=150_754_820_096)):
        hw = attribution(host, loaded)
        assert hw.target_match is True
        assert hw.attributed_id == detected_hardware_id(host) != "cpu-generic"


def test_known_gpu_bandwidths() -> None:
    from servepack.host.fingerprint import gpu_bandwidth_gbs

    assert gpu_bandwidth_gbs("NVIDIA H200") == 4800.0
    assert gpu_bandwidth_gbs("NVIDIA GB10") == 273.0
    assert gpu_bandwidth_gbs("NVIDIA T4") is None
