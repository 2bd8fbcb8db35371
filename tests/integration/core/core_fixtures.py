"""Helpers for the lifecycle tests: a stand-in llama-server binary and a pack whose model is a tiny GGUF."""

from __future__ import annotations

import hashlib
import stat
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent / "unit" / "core"))

from gguf_writer import write_gguf  # noqa: E402


def write_fake_server_bin(directory: Path) -> Path:
    """An executable `llama-server` that runs the shared fake server (servepack.testing.fake_server)."""
    exe = directory / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m servepack.testing.fake_server \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def make_pack(tmp_path: Path, *, hardware: str = "cpu") -> Path:
    model = tmp_path / "tiny.gguf"
    write_gguf(model, {"general.architecture": "llama", "general.file_type": 1, "llama.context_length": 512},
               [("w", (64,), 0)])
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    hw = ('id = "cpu-generic"\nlabel = "any"\n[hardware.match]\ncpu_arch = []\n' if hardware == "cpu" else
          'id = "dgx-spark-gb10-128gb"\nlabel = "Spark"\n[hardware.match]\ngpu_name = "^NVIDIA GB10$"\n'
          'cpu_arch = ["aarch64"]\n')
    text = f"""
schema_version = "servepack.pack/v1"
id = "tiny-test"
description = "test pack"
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
{hw}
[presets.p.flags]
ctx-size = 512
alias = "tiny"
jinja = true
[bench]
preset = "p"
context_marks = [64]
[claims]
[claims.headline]
metric = "decode_tok_s"
preset = "p"
context_tokens = 64
gen_tokens = 8
[smoke]
preset = "p"
"""
    path = tmp_path / "tiny-test.toml"
    path.write_text(text)
    return path


def count_resolves(monkeypatch: Any, model: Path) -> dict[str, int]:
    """Counters of the model's hashes (any `HashCache.sha256` of `model`, cached or not) and of the engine's locates
    (llama.cpp's `locate_binary`), seen from anywhere in the run."""
    import servepack.engine.llamacpp as llamacpp_mod
    from servepack.weights.hashcache import HashCache

    seen = {"hash": 0, "locate": 0}
    real_sha, real_locate = HashCache.sha256, llamacpp_mod.locate_binary

    def sha256(self: HashCache, path: Path, **kwargs: Any) -> str:
        if path.resolve() == model.resolve():
            seen["hash"] += 1
        return real_sha(self, path, **kwargs)

    def locate_binary(name: str, *args: Any, **kwargs: Any) -> Any:
        seen["locate"] += 1
        return real_locate(name, *args, **kwargs)

    monkeypatch.setattr(HashCache, "sha256", sha256)
    monkeypatch.setattr(llamacpp_mod, "locate_binary", locate_binary)
    return seen
