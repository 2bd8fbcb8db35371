"""benchmarks/twin_header_32b.py: a Qwen2.5-32B-shaped Q4_K_M header made from a small Qwen2 header (the embedded
0.5B's stand-in here): the shape, the tensor types a real Q4_K_M file has, and its size, read back by servepack."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from types import ModuleType

from servepack.bench.roofline import bytes_per_token
from servepack.weights.gguf import GGML_TYPES, read_header

SCRIPT = Path(__file__).parents[3] / "benchmarks" / "twin_header_32b.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("twin_header_32b", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def _source(path: Path) -> None:
    """A Qwen2 header: 2 layers of hidden 64, 10 tokens with their types, a chat template, one tensor."""
    kvs = [
        _s("general.architecture") + struct.pack("<I", 8) + _s("qwen2"),
        _s("qwen2.block_count") + struct.pack("<II", 4, 2),
        _s("qwen2.embedding_length") + struct.pack("<II", 4, 64),
        _s("qwen2.rope.freq_base") + struct.pack("<If", 6, 1e6),
        _s("general.file_type") + struct.pack("<II", 4, 7),
        _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 10) + b"".join(_s(f"t{i}") for i in range(10)),
        _s("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, 10) + struct.pack("<10i", *([1] * 10)),
        _s("tokenizer.chat_template") + struct.pack("<I", 8) + _s("{{ messages }}"),
    ]
    tensor = _s("token_embd.weight") + struct.pack("<IQQIQ", 2, 64, 10, 0, 0)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + tensor
    path.write_bytes(head + b"\0" * (-len(head) % 32) + b"\0" * 2560)


def test_the_header_has_qwen25_32bs_shape_q4_k_m_types_and_size(tmp_path: Path) -> None:
    src, out = tmp_path / "small.gguf", tmp_path / "q32b-header.gguf"
    _source(src)
    assert _script().main([str(src), str(out)]) == 0
    h = read_header(out)
    shape = {k: h.arch_value(k) for k in ("block_count", "embedding_length", "feed_forward_length",
                                           "attention.head_count", "attention.head_count_kv")}
    assert shape == {"block_count": 64, "embedding_length": 5120, "feed_forward_length": 27648,
                     "attention.head_count": 40, "attention.head_count_kv": 8}
    assert h.quantization == "Q4_K_M" and h.metadata["qwen2.rope.freq_base"] == 1e6  # other keys kept
    assert h.metadata["tokenizer.chat_template"] == "{{ messages }}"
    tokens, types = h.metadata["tokenizer.ggml.tokens"], h.metadata["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == 152064 and tokens[9] == "t9" and tokens[10] == "[PAD10]"
    assert types[9] == 1 and types[10] == 5  # the converter's padding rows are UNUSED
    assert len(h.tensors) == 771 and h.parameter_count == 32_763_876_352
    assert h.tensor_bytes == 19_845_357_568 and h.data_offset + h.tensor_bytes == out.stat().st_size + 19_845_357_568
    q6 = {t.name for t in h.tensors if GGML_TYPES[t.ggml_type][0] == "Q6_K"}
    more = [i for i in range(64) if f"blk.{i}.ffn_down.weight" in q6]
    # llama.cpp's use_more_bits: the first and last eighth, and every third layer between (10, 13, ..., 55)
    assert more == [*range(8), *range(10, 56, 3), *range(56, 64)] and len(more) == 32
    assert {i for i in range(64) if f"blk.{i}.attn_v.weight" in q6} == set(more)
    assert "output.weight" in q6 and "blk.8.ffn_down.weight" not in q6  # the wrong answer: every layer Q6_K
    assert {GGML_TYPES[t.ggml_type][0] for t in h.tensors if t.name.endswith(("_norm.weight", ".bias"))} == {"F32"}
    # what capacity reads a decode step from it: everything but the looked-up embedding (as on the H100 run)
    assert bytes_per_token(h) == (19_407_413_248, "dense")
    assert _script().main([str(src), str(out)]) == 2  # never overwrites
