"""Helpers for the tune tests: the surface stand-in as a `llama-server` executable, and a tiny pack to tune."""

from __future__ import annotations

import hashlib
import stat
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent / "unit" / "core"))

from gguf_writer import write_gguf  # noqa: E402


def dies_on_launch(directory: Path) -> Path:
    """A llama-server that answers --version (so it is located) and exits 3 on every launch."""
    exe = directory / "llama-server"
    surface = f"{sys.executable} -m servepack.testing.surface_server"
    exe.write_text("#!/bin/sh\n"
                   f'if [ "$1" = "--version" ]; then exec {surface} "$@"; fi\n'
                   "echo 'error: failed to load model (scripted)'\nexit 3\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def write_surface_bin(directory: Path) -> Path:
    """An executable `llama-server` that runs servepack.testing.surface_server with its argv."""
    exe = directory / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m servepack.testing.surface_server \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def make_tune_pack(directory: Path, *, guard_gb: float | None = None) -> Path:
    """A pack whose base preset runs 4 threads without flash attention (the surface's best is 8 threads, on)."""
    model = directory / "tiny.gguf"
    write_gguf(model, {"general.architecture": "llama", "general.file_type": 1, "llama.context_length": 512},
               [("w", (64,), 0)])
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    guards = f"[bench.guards]\nmin_available_ram_gb = {guard_gb}\n" if guard_gb is not None else ""
    text = f"""
schema_version = "servepack.pack/v1"
id = "tiny-tune"
description = "pack for tune tests"
default_preset = "p"
[model]
name = "tiny"
quant = "F16"
file = "tiny.gguf"
model_instance_id = "tiny"
sha256 = "{sha}"
[model.source]
kind = "file"
path = "tiny.gguf"
[engine]
name = "llama.cpp"
repo = "r"
commit = "abc1234"
expected_version = "version: 1 (abc1234)"
[hardware]
id = "cpu-generic"
label = "any"
generic = true
[hardware.match]
cpu_arch = []
[presets.p.flags]
ctx-size = 512
alias = "tiny"
threads = 4
flash-attn = "off"
[bench]
preset = "p"
context_marks = [64]
gen_tokens = 16
samples = 5
{guards}[claims]
[claims.headline]
metric = "decode_tok_s"
preset = "p"
context_tokens = 64
gen_tokens = 16
[smoke]
preset = "p"
"""
    path = directory / "tiny-tune.toml"
    path.write_text(text)
    return path


def write_space(directory: Path, text: str) -> Path:
    path = directory / "space.toml"
    path.write_text(text)
    return path
