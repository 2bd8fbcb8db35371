"""A GGUF header with Qwen2.5-32B-Instruct's shape, Q4_K_M, made from the embedded 0.5B header (a twin source).

    python benchmarks/twin_header_32b.py SOURCE.gguf OUT.gguf

No network: the tokenizer, chat template and every key are the 0.5B file's (the Qwen2.5 family shares them); the
shape keys and the tensor list are Qwen2.5-32B's (64 layers, hidden 5120, FFN 27648, 40 query heads, 8 KV heads,
head dim 128, vocabulary padded to 152064 rows as the converter pads it), with the tensor types llama.cpp's Q4_K_M
gives them: Q4_K everywhere, Q6_K for `output.weight` and for `attn_v`/`ffn_down` on the layers its
`use_more_bits` rule picks (the first and last eighth, and every third between), F32 norms and biases. The tensor data
then comes to ~19.85 GB, the size of the published Qwen2.5-32B-Instruct Q4_K_M file. OUT holds the header only
(metadata, tensor infos, alignment padding); `servepack twin OUT TWIN.gguf` writes the random tensor bytes.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import IO, Any

ARCH = "qwen2"
N_LAYER, N_EMBD, N_FF, N_HEAD, N_HEAD_KV, HEAD_DIM, N_VOCAB = 64, 5120, 27648, 40, 8, 128, 152064
F32, Q4_K, Q6_K = 0, 12, 14
BLOCK = {F32: (1, 4), Q4_K: (256, 144), Q6_K: (256, 210)}
SHAPE_KEYS: dict[str, Any] = {
    f"{ARCH}.block_count": N_LAYER, f"{ARCH}.embedding_length": N_EMBD, f"{ARCH}.feed_forward_length": N_FF,
    f"{ARCH}.attention.head_count": N_HEAD, f"{ARCH}.attention.head_count_kv": N_HEAD_KV,
    f"{ARCH}.context_length": 32768, "general.name": "Qwen2.5 32B Instruct (shape twin header)",
    "general.size_label": "32B", "general.finetune": "Instruct", "general.basename": "Qwen2.5",
    "general.file_type": 15,  # Q4_K_M
}
STRING, ARRAY = 8, 9
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
TOKEN_UNUSED = 5  # gguf TokenType.UNUSED: the converter's [PADn] rows


def _read(fh: IO[bytes], fmt: str) -> Any:
    return struct.unpack(fmt, fh.read(struct.calcsize(fmt)))[0]


def _read_value(fh: IO[bytes], vtype: int) -> tuple[int, Any]:
    """(type, value); an array's value is (item type, items)."""
    if vtype in SCALARS:
        return vtype, _read(fh, SCALARS[vtype])
    if vtype == STRING:
        return vtype, fh.read(_read(fh, "<Q")).decode("utf-8")
    item, count = _read(fh, "<I"), _read(fh, "<Q")
    return vtype, (item, [_read_value(fh, item)[1] for _ in range(count)])


def _value_bytes(vtype: int, value: Any) -> bytes:
    if vtype in SCALARS:
        return struct.pack(SCALARS[vtype], value)
    if vtype == STRING:
        raw = value.encode("utf-8")
        return struct.pack("<Q", len(raw)) + raw
    item, items = value
    return struct.pack("<IQ", item, len(items)) + b"".join(_value_bytes(item, v) for v in items)


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits(i_layer, n_layers): the layers Q4_K_M gives Q6_K for attn_v and ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensors() -> list[tuple[str, tuple[int, ...], int]]:
    """(name, GGUF shape (fastest dimension first), ggml type), in the order the converter writes them."""
    kv = N_HEAD_KV * HEAD_DIM
    out: list[tuple[str, tuple[int, ...], int]] = [("token_embd.weight", (N_EMBD, N_VOCAB), Q4_K)]
    for i in range(N_LAYER):
        big = Q6_K if more_bits(i, N_LAYER) else Q4_K
        out += [
            (f"blk.{i}.attn_norm.weight", (N_EMBD,), F32),
            (f"blk.{i}.ffn_down.weight", (N_FF, N_EMBD), big),
            (f"blk.{i}.ffn_gate.weight", (N_EMBD, N_FF), Q4_K),
            (f"blk.{i}.ffn_up.weight", (N_EMBD, N_FF), Q4_K),
            (f"blk.{i}.ffn_norm.weight", (N_EMBD,), F32),
            (f"blk.{i}.attn_k.bias", (kv,), F32),
            (f"blk.{i}.attn_k.weight", (N_EMBD, kv), Q4_K),
            (f"blk.{i}.attn_output.weight", (N_HEAD * HEAD_DIM, N_EMBD), Q4_K),
            (f"blk.{i}.attn_q.bias", (N_HEAD * HEAD_DIM,), F32),
            (f"blk.{i}.attn_q.weight", (N_EMBD, N_HEAD * HEAD_DIM), Q4_K),
            (f"blk.{i}.attn_v.bias", (kv,), F32),
            (f"blk.{i}.attn_v.weight", (N_EMBD, kv), big),
        ]
    out += [("output_norm.weight", (N_EMBD,), F32), ("output.weight", (N_EMBD, N_VOCAB), Q6_K)]
    return out


def n_bytes(shape: tuple[int, ...], ggml_type: int) -> int:
    block, size = BLOCK[ggml_type]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


def build(source: Path) -> tuple[bytes, int]:
    """The new header's bytes (padded to the alignment) and its tensor data size."""
    with source.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise SystemExit(f"{source}: not a GGUF file")
        version, _n_tensors, n_kv = _read(fh, "<I"), _read(fh, "<Q"), _read(fh, "<Q")
        kvs: list[tuple[str, int, Any]] = []
        for _ in range(n_kv):
            key = fh.read(_read(fh, "<Q")).decode("utf-8")
            vtype, value = _read_value(fh, _read(fh, "<I"))
            kvs.append((key, vtype, value))
    align = 32
    body = bytearray()
    for key, vtype, value in kvs:
        if key in SHAPE_KEYS:
            value = SHAPE_KEYS[key]
        elif key == "general.alignment":
            align = value
        elif key == "tokenizer.ggml.tokens":
            item, items = value
            value = (item, items + [f"[PAD{i}]" for i in range(len(items), N_VOCAB)])
        elif key == "tokenizer.ggml.token_type":
            item, items = value
            value = (item, items + [TOKEN_UNUSED] * (N_VOCAB - len(items)))
        raw_key = key.encode("utf-8")
        body += struct.pack("<Q", len(raw_key)) + raw_key + struct.pack("<I", vtype) + _value_bytes(vtype, value)
    seen = {key for key, _, _ in kvs}
    for key, value in SHAPE_KEYS.items():  # a shape key the source lacks is added (a u32 or a string)
        if key not in seen:
            vtype = STRING if isinstance(value, str) else 4
            raw_key = key.encode("utf-8")
            body += struct.pack("<Q", len(raw_key)) + raw_key + struct.pack("<I", vtype) + _value_bytes(vtype, value)
            kvs.append((key, vtype, value))
    offset = 0
    for name, shape, ggml_type in tensors():
        raw = name.encode("utf-8")
        body += struct.pack("<Q", len(raw)) + raw + struct.pack("<I", len(shape))
        body += b"".join(struct.pack("<Q", d) for d in shape) + struct.pack("<IQ", ggml_type, offset)
        size = n_bytes(shape, ggml_type)
        offset += size + (-size % align)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors()), len(kvs)) + bytes(body)
    head += b"\0" * (-len(head) % align)
    return head, offset


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    source, out = Path(argv[0]), Path(argv[1])
    if out.exists():
        print(f"{out} already exists; choose another output path", file=sys.stderr)
        return 2
    head, data = build(source)
    out.write_bytes(head)
    print(f"{out}: header {len(head):,} bytes, {len(tensors())} tensors, tensor data {data:,} bytes "
          f"({(len(head) + data) / 1e9:.2f} GB as a twin)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
