"""Issue 33 item 5: memory is judged from what the launch does — weights on the GPU against its memory, in host RAM
against the available RAM, split between them against both — and unknown says unknown.

The wrong answer (before): an IQ2_XXS DeepSeek-V4-Flash record offloading experts to system RAM (`--n-cpu-moe 36`)
was judged by its 23.3 GB peak VRAM against 22.9 GiB of RAM and called "ok memory"; its weights are 86 GB. And a
30 GiB GGUF fully offloaded (-ngl 99) was judged against RAM + VRAM together (24 GiB GPU + 64 GiB RAM: "ok")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servepack.registry.checks import GIB, LocalModel, check_memory
from servepack.registry.format import LoadedRecord, parse_record
from servepack.registry.host_facts import HostFacts
from servepack.registry.recipe_facts import weights_placement

TREE = Path(__file__).parents[2] / "fixtures" / "registry" / "tree"


@pytest.mark.parametrize(("args", "where"), [
    (["-ngl", "99"], "gpu"),
    (["--n-gpu-layers", "999"], "gpu"),
    (["-ngl", "all"], "gpu"),
    (["-ngl", "0"], "host"),
    (["-ngl", "99", "--n-cpu-moe", "36"], "split"),
    (["-ngl", "99", "--n-cpu-moe", "0"], "gpu"),
    (["-ngl", "99", "--cpu-moe"], "split"),
    (["-ngl", "99", "-ot", "blk\\.(1[0-9])\\.ffn_.*_exps\\.=CPU"], "split"),
    (["-ngl", "99", "--override-tensor=exps=CPU"], "split"),
    (["-ngl", "99", "-ot", "exps=CUDA0"], "gpu"),
    (["-ngl", "20"], "split"),
    (["-ngl", "auto"], "unknown"),
    ([], "unknown"),
])
def test_where_the_launch_puts_the_weights(args: list[str], where: str) -> None:
    assert weights_placement(["llama-server", "-m", "x.gguf", *args]).where == where


def _recipe(tmp_path: Path, extra: list[str]) -> LoadedRecord:
    doc = json.loads((TREE / "recipe" / "wren-7b-native.json").read_text())
    args = doc["launch"]["arguments"]
    del args[args.index("-ngl"):args.index("-ngl") + 2]
    args += extra
    path = tmp_path / "recipe" / "wren-7b-native.json"
    path.parent.mkdir(exist_ok=True)
    raw = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    path.write_bytes(raw)
    return parse_record(raw, path)


def _host(ram_gib: float, gpu_gib: float | None) -> HostFacts:
    return HostFacts("h", "Test host", int(ram_gib * GIB) + GIB, int(ram_gib * GIB),
                     int(gpu_gib * GIB) if gpu_gib else None, Path("/nonexistent"), None,
                     probe=lambda n: None)  # type: ignore[arg-type,return-value]


class _Held:
    def __init__(self, record: dict[str, Any]) -> None:
        self.id = "s"
        self.loaded = type("L", (), {"record": record})()


SWEEP = _Held({"metrics": {}, "rows": [{"peak_vram_gb": 23.3, "context_tokens": 8192}]})
WEIGHTS = (86.0, "weights 86.00 GB stated by model instance deepseek-v4-flash--iq2-xxs (weights.size_gb)")


def test_an_86_gb_model_offloading_experts_is_never_ok_in_24_gb(tmp_path: Path) -> None:
    rec = _recipe(tmp_path, ["-ngl", "99", "--n-cpu-moe", "36"])
    c = check_memory(rec, _host(22.9, None), None, 8192, [(SWEEP, [])], WEIGHTS)  # type: ignore[list-item]
    assert c.ok is False
    assert c.detail.startswith("weights 86.00 GB stated by model instance")
    assert "beyond this host's 22.9 GiB" in c.detail
    # a 24 GiB GPU beside 64 GiB of RAM: together they may hold it, but the split is not known — never "ok"
    c = check_memory(rec, _host(64, 24), None, 8192, [(SWEEP, [])], WEIGHTS)  # type: ignore[list-item]
    assert c.ok is None and "--n-cpu-moe 36 keeps the experts of 36 layers in host RAM" in c.detail
    # without the weights' size, the VRAM figure does not count what sits in host RAM: unknown, not ok
    c = check_memory(rec, _host(22.9, 24), None, 8192, [(SWEEP, [])])  # type: ignore[list-item]
    assert c.ok is None and "which that figure does not count" in c.detail


def test_vram_and_ram_are_judged_apart(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"not a gguf")
    model = LocalModel(tmp_path / "m.gguf", 30 * GIB, None, "test")  # no header: KV not estimable
    full = _recipe(tmp_path, ["-ngl", "99"])
    c = check_memory(full, _host(64, 24), model, 8192, [])
    assert c.ok is False and "beyond this host's 24.0 GiB GPU memory (-ngl 99: every layer on the GPU)" in c.detail
    on_host = _recipe(tmp_path, ["-ngl", "0"])
    c = check_memory(on_host, _host(64, 24), model, 8192, [])
    assert c.ok is True and "within this host's 64.0 GiB available RAM" in c.detail
    assert "KV cache not estimable" in c.detail
    c = check_memory(on_host, _host(16, 80), model, 8192, [])
    assert c.ok is False and "beyond this host's 16.0 GiB available RAM" in c.detail


def test_a_gpu_launch_within_its_measured_vram_is_ok(tmp_path: Path) -> None:
    rec = _recipe(tmp_path, ["-ngl", "99"])
    small = _Held({"metrics": {}, "rows": [{"peak_vram_gb": 6.0, "context_tokens": 8192}]})
    c = check_memory(rec, _host(16, 24), None, 8192, [(small, [])], (4.5, "weights 4.50 GB"))  # type: ignore[list-item]
    assert c.ok is True and "within this host's 24.0 GiB GPU memory" in c.detail
    c = check_memory(rec, _host(16, 4), None, 8192, [(small, [])])  # type: ignore[list-item]
    assert c.ok is False
