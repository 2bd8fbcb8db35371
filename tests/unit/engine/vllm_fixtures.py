"""Helpers for the vLLM engine tests: a vLLM pack file and a stand-in `vllm` executable."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
# `vllm serve` flags as vLLM's engine-argument reference names them (docs.vllm.ai, "Engine Arguments"); the
# ones servepack sets itself from a pack.
DOCUMENTED = frozenset({
    "--host", "--port", "--revision", "--served-model-name", "--tensor-parallel-size", "--pipeline-parallel-size",
    "--max-model-len", "--gpu-memory-utilization", "--dtype", "--quantization", "--distributed-executor-backend",
})


def write_vllm_bin(directory: Path) -> Path:
    """An executable named `vllm` that runs the stand-in (servepack.testing.vllm_standin) with this Python."""
    exe = directory / "vllm"
    exe.write_text(f"#!{sys.executable}\nimport runpy\n"
                   "runpy.run_module('servepack.testing.vllm_standin', run_name='__main__')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def vllm_pack(tmp_path: Path, *, vllm: str = 'served_model_name = "tiny-vllm"\nmax_model_len = 512',
              flags: str = "", source: str = f'kind = "hf-repo"\nrepo = "org/tiny"\nrevision = "{COMMIT}"',
              engine: str = 'name = "vllm"\nrepo = "https://github.com/vllm-project/vllm"\npackage = "vllm"\n'
                            'package_version = "0.8.5"', model: str = "", name: str = "tiny-vllm.toml") -> Path:
    """A vLLM pack with one preset `p` (its [vllm] table and flags as given) on a generic CPU target; `model`:
    further lines of the [model] table."""
    text = f"""
schema_version = "servepack.pack/v1"
id = "tiny-vllm"
description = "test pack for the vLLM engine"
default_preset = "p"
[model]
name = "tiny"
quant = "bf16"
model_instance_id = "tiny-bf16"
{model}
[model.source]
{source}
[engine]
{engine}
[hardware]
id = "cpu-generic"
label = "any"
generic = true
[hardware.match]
cpu_arch = []
[presets.p]
[presets.p.flags]
{flags}
[presets.p.vllm]
{vllm}
[bench]
preset = "p"
context_marks = [64]
[claims]
[claims.headline]
metric = "decode_tok_s"
source = "client"
preset = "p"
context_tokens = 64
gen_tokens = 8
[smoke]
preset = "p"
suites = ["agent_smoke"]
"""
    path = tmp_path / name
    path.write_text(text)
    return path
