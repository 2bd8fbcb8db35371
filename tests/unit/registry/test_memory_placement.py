"""Issue 33 item 5: memory is judged from what the launch does — weights on the GPU against its memory, in host RAM
against the available RAM, split between them against both — and unknown says unknown.

The wrong answer (before): an IQ2_XXS DeepSeek-V4-Flash record offloading experts to system RAM (`--n-cpu-moe 36`)
was judged by its 23.3 GB peak VRAM against 22.9 GiB of RAM and called "ok memory"; its weights are 86 GB. And a
30 GiB GGUF fully offloaded (-ngl 99) was judged against RAM + VRAM together (24 GiB GPU + 64 GiB RAM: "ok")."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from servepack.registry.checks import GIB, LocalModel, check_memory
from servepack.registry.format import LoadedRecord, parse_record
from servepack.registry.host_facts import HostFacts
from servepack.registry.recipe_facts import weights_placement

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from gguf_writer import write_gguf

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
    # the weights fit, the KV cache is not known: unknown, never "ok" on the weights alone (issue 33)
    assert c.ok is None and "within this host's 64.0 GiB available RAM" in c.detail
    assert "the KV cache at 8,192 tokens is unknown (" in c.detail
    c = check_memory(on_host, _host(16, 80), model, 8192, [])
    assert c.ok is False and "beyond this host's 16.0 GiB available RAM" in c.detail


def test_a_gpu_launch_within_its_measured_vram_is_ok(tmp_path: Path) -> None:
    rec = _recipe(tmp_path, ["-ngl", "99"])
    small = _Held({"metrics": {}, "rows": [{"peak_vram_gb": 6.0, "context_tokens": 8192}]})
    c = check_memory(rec, _host(16, 24), None, 8192, [(small, [])], (4.5, "weights 4.50 GB"))  # type: ignore[list-item]
    assert c.ok is True and "within this host's 24.0 GiB GPU memory" in c.detail
    c = check_memory(rec, _host(16, 4), None, 8192, [(small, [])])  # type: ignore[list-item]
    assert c.ok is False


LLAMA_SHAPES = {"llama.block_count": 32, "llama.embedding_length": 4096, "llama.attention.head_count": 32,
                "llama.attention.head_count_kv": 8}


def _gguf(tmp_path: Path, name: str, shapes: dict[str, int], size_gib: float) -> LocalModel:
    path = tmp_path / name
    write_gguf(path, {"general.architecture": "llama", **shapes}, [("w", (64,), 0)])
    return LocalModel(path, int(size_gib * GIB), None, "test")


def test_weights_that_fit_are_not_ok_when_the_kv_cache_is_unknown(tmp_path: Path) -> None:
    """Issue 33 (open item 1): a GGUF whose header lacks the attention shapes was judged on its weights alone and
    called ok. The KV part is unknown, so the check is unknown; weights that alone do not fit are still NO; a header
    with the shapes is judged on weights + KV cache (ok where both fit, NO where the KV cache tips it over)."""
    rec = _recipe(tmp_path, ["-ngl", "99"])
    bare = _gguf(tmp_path, "bare.gguf", {"llama.block_count": 32}, 4.0)  # no head counts, no embedding length
    c = check_memory(rec, _host(64, 24), bare, 8192, [])
    assert c.ok is not True  # the wrong answer: "needs 4.00 GiB (GGUF 4.00 GiB …) within …" and ok
    assert c.ok is None
    assert c.detail == ("GGUF 4.00 GiB within this host's 24.0 GiB GPU memory (-ngl 99: every layer on the GPU); "
                        "the KV cache at 8,192 tokens is unknown (the GGUF header lacks the attention shapes or the "
                        "K/V type f16/f16 is unknown), so weights and KV cache together are not known to fit")
    # weights alone beyond the GPU: NO, whatever the KV cache is
    c = check_memory(rec, _host(64, 3), bare, 8192, [])
    assert c.ok is False and c.detail.startswith("GGUF 4.00 GiB beyond this host's 3.0 GiB GPU memory")
    assert "before any KV cache (KV cache not estimable: the GGUF header lacks" in c.detail
    # a K/V type the table does not know leaves the KV part unknown too
    odd = _recipe(tmp_path, ["-ngl", "99", "--cache-type-k", "tq3_0"])
    full = _gguf(tmp_path, "full.gguf", LLAMA_SHAPES, 4.0)
    c = check_memory(odd, _host(64, 24), full, 8192, [])
    assert c.ok is None and "K/V type tq3_0/f16 is unknown" in c.detail
    # the shapes known: 32 layers × 8 KV heads × 128 dims × (2+2) bytes × 8,192 tokens = 1 GiB of KV cache
    c = check_memory(rec, _host(64, 24), full, 8192, [])
    assert c.ok is True
    assert c.detail.startswith("needs 5.00 GiB (GGUF 4.00 GiB + KV cache 1.00 GiB at 8,192 tokens (f16/f16))")
    c = check_memory(rec, _host(64, 4.5), full, 8192, [])  # the weights fit, weights + KV cache do not
    assert c.ok is False and "beyond this host's 4.5 GiB GPU memory" in c.detail


def test_a_launch_that_does_not_say_is_ok_only_where_either_default_fits(tmp_path: Path) -> None:
    """No -ngl: an older llama.cpp keeps every weight in host RAM, a newer one offloads what fits (-ngl auto). Host
    RAM that holds it all is enough either way: ok. A GPU that holds it beside RAM that does not is enough only for
    the newer default: unknown, naming both. The wrong answer (before): "ok, within the GPU memory alone"."""
    (tmp_path / "m.gguf").write_bytes(b"not a gguf")
    rec = _recipe(tmp_path, [])
    assert weights_placement(["llama-server", "-m", "x.gguf"]).where == "unknown"
    twenty = LocalModel(tmp_path / "m.gguf", 20 * GIB, None, "test")  # no header: judged on its weights
    c = check_memory(rec, _host(16, 80), twenty, 8192, [])
    assert c.ok is None and c.ok is not True
    assert "within this host's 80.0 GiB GPU memory but beyond this host's 16.0 GiB available RAM" in c.detail
    assert "-ngl auto" in c.detail and "(no -ngl)" in c.detail
    c = check_memory(rec, _host(16, 8), twenty, 8192, [])  # 24 GiB together: how much goes where is not known
    assert c.ok is None and "within this host's 8.0 GiB GPU memory and this host's 16.0 GiB" in c.detail
    c = check_memory(rec, _host(10, 8), twenty, 8192, [])
    assert c.ok is False and "beyond this host's 8.0 GiB GPU memory and this host's 10.0 GiB available RAM" in c.detail
    # RAM holds the weights: the weights fit either way (the KV cache still unknown without the header)
    c = check_memory(rec, _host(64, 8), twenty, 8192, [])
    assert c.ok is None and c.detail.startswith("GGUF 20.00 GiB within this host's 64.0 GiB available RAM")
    shaped = _gguf(tmp_path, "shaped.gguf", LLAMA_SHAPES, 4.0)
    c = check_memory(rec, _host(64, 8), shaped, 8192, [])
    assert c.ok is True and "within this host's 64.0 GiB available RAM" in c.detail and "alone (" in c.detail
    c = check_memory(rec, _host(2, 80), shaped, 8192, [])
    assert c.ok is None and "-ngl auto" in c.detail
