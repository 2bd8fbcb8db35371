from __future__ import annotations

from pathlib import Path

import pytest
from gguf_writer import write_gguf

from servepack.errors import ModelError
from servepack.weights.gguf import read_header

META = {"general.architecture": "qwen2", "general.name": "tiny", "general.file_type": 15,
        "qwen2.context_length": 32768, "tokenizer.ggml.tokens": ["a", "b", "c"]}


def test_reads_metadata_tensors_and_offset(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    off = write_gguf(f, META, [("tok_embd.weight", (8, 4), 0), ("out.weight", (10,), 1)])
    h = read_header(f)
    assert h.architecture == "qwen2"
    assert h.context_length == 32768
    assert h.quantization == "Q4_K_M"
    assert h.parameter_count == 8 * 4 + 10
    assert h.data_offset == off and off % 32 == 0
    # second tensor starts at the aligned offset 128; it holds 10 F16 values
    assert h.tensor_bytes == 128 + 20
    assert h.metadata["tokenizer.ggml.tokens"] == ["a", "b", "c"]
    assert h.summary()["tensor_count"] == 2


def test_header_only_file_parses(tmp_path: Path) -> None:
    f = tmp_path / "head.gguf"
    write_gguf(f, META, [("w", (64,), 0)], with_data=False)
    assert read_header(f).tensor_bytes == 256


def test_truncated_and_bad_magic_are_model_errors(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    write_gguf(f, META, [("w", (4,), 0)])
    t = tmp_path / "t.gguf"
    t.write_bytes(f.read_bytes()[:40])
    with pytest.raises(ModelError, match="truncated"):
        read_header(t)
    b = tmp_path / "b.gguf"
    b.write_bytes(b"NOPE" + b"\0" * 40)
    with pytest.raises(ModelError, match="not a GGUF"):
        read_header(b)
