"""A small GGUF header reader: metadata, tensor infos, and where the tensor data starts.

Reads only the header, so it works on a full model or on just its first bytes (a shape twin's source).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from servepack.errors import ModelError
from servepack.safepath import open_regular

GGUF_MAGIC = b"GGUF"
MODEL_HINT = "give a GGUF model file"
DEFAULT_ALIGNMENT = 32

# ggml_type id -> (name, block size in elements, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}

# llama.cpp's general.file_type values
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
    18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
    25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
    32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# llama.cpp reads no array of arrays at all; a little depth is tolerated, thousands is a hostile file.
MAX_ARRAY_DEPTH = 4
GGML_MAX_DIMS = 4
MAX_STRING_BYTES = 1 << 24


def _int_or_none(value: Any) -> int | None:
    """An integer metadata value; None when it is absent or not an integer (a corrupt or odd header)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def alignment_of(metadata: dict[str, Any], source: str) -> int:
    """general.alignment: a power of two (llama.cpp's rule); DEFAULT_ALIGNMENT when absent."""
    align = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise ModelError(f"{source}: general.alignment is {align!r}, not a power of two; the GGUF header is corrupt "
                         "(re-download or re-convert the file)")
    return align


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        if self.ggml_type not in GGML_TYPES:
            raise ModelError(f"tensor {self.name}: unknown ggml type {self.ggml_type}")
        _, block, size = GGML_TYPES[self.ggml_type]
        return self.n_elements // block * size


@dataclass(frozen=True)
class GgufHeader:
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int = field(metadata={"doc": "byte offset where tensor data begins (aligned)"})

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return str(arch) if arch is not None else None

    def arch_value(self, key: str) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}")

    @property
    def context_length(self) -> int | None:
        return _int_or_none(self.arch_value("context_length"))

    @property
    def parameter_count(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of tensor data, including alignment padding between tensors (= file size − data_offset)."""
        if not self.tensors:
            return 0
        last = max(self.tensors, key=lambda t: t.offset)
        return last.offset + last.n_bytes

    @property
    def quantization(self) -> str | None:
        ft = self.metadata.get("general.file_type")
        if ft is None:
            return None
        number = _int_or_none(ft)
        return FILE_TYPES.get(number, f"file_type {number}") if number is not None else f"file_type {ft!r:.40}"

    @property
    def expert_count(self) -> int | None:
        return _int_or_none(self.arch_value("expert_count")) or None

    @property
    def expert_used_count(self) -> int | None:
        return _int_or_none(self.arch_value("expert_used_count")) or None

    def summary(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "name": self.metadata.get("general.name"),
            "parameters": self.parameter_count,
            "quantization": self.quantization,
            "context_length": self.context_length,
            "tensor_count": len(self.tensors),
            "tensor_bytes": self.tensor_bytes,
            "data_offset": self.data_offset,
            "expert_count": self.expert_count,
            "expert_used_count": self.expert_used_count,
        }


class _Reader:
    def __init__(self, fh: IO[bytes], source: str) -> None:
        self.fh = fh
        self.source = source
        # bytes left to read, when the stream can tell; a count larger than this is a truncated header
        try:
            start = fh.tell()
            self.end: int | None = fh.seek(0, 2)
            fh.seek(start)
        except (OSError, ValueError):
            self.end = None

    def truncated(self) -> ModelError:
        return ModelError(f"{self.source}: GGUF header is truncated (the file is shorter than its header)")

    def take(self, n: int) -> bytes:
        self.room_for(n, 1)
        data = self.fh.read(n)
        if len(data) != n:
            raise self.truncated()
        return data

    def room_for(self, count: int, each: int) -> None:
        """Refuse, before allocating, a count of items the rest of the file cannot hold."""
        if self.end is not None and count * each > self.end - self.fh.tell():
            raise self.truncated()

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > MAX_STRING_BYTES:
            raise ModelError(f"{self.source}: GGUF string of {n} bytes; the header is corrupt")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise ModelError(f"{self.source}: GGUF arrays nested deeper than {MAX_ARRAY_DEPTH}; the header is "
                                 "corrupt or hostile (re-download or re-convert the file)")
            item_type, count = self.unpack("<I"), self.unpack("<Q")
            self.room_for(count, struct.calcsize(_SCALARS[item_type]) if item_type in _SCALARS else 8)
            return [self.value(item_type, depth + 1) for _ in range(count)]
        raise ModelError(f"{self.source}: unknown GGUF value type {vtype}")


def read_header(path: Path) -> GgufHeader:
    """Parse the GGUF header of `path` (a full model or only its leading bytes)."""
    try:
        with open_regular(path, MODEL_HINT, error=ModelError) as fh:
            return parse_header(fh, str(path))
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({exc.strerror})") from None


def parse_header(fh: IO[bytes], source: str = "<stream>") -> GgufHeader:
    r = _Reader(fh, source)
    if r.take(4) != GGUF_MAGIC:
        raise ModelError(f"{source}: not a GGUF file (bad magic)")
    version = r.unpack("<I")
    if version not in (2, 3):
        raise ModelError(f"{source}: GGUF version {version} is not supported (2 or 3)")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    r.room_for(n_kv, 8 + 4)  # each key/value: at least a string length and a type
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        metadata[key] = r.value(r.unpack("<I"))
    r.room_for(n_tensors, 8 + 4 + 4 + 8)  # each tensor info: name length, n_dims, type, offset
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("<I")
        if n_dims > GGML_MAX_DIMS:
            raise ModelError(f"{source}: tensor {name[:80]!r} has {n_dims} dimensions (at most {GGML_MAX_DIMS}); "
                             "the GGUF header is corrupt")
        shape = tuple(r.unpack("<Q") for _ in range(n_dims))
        tensors.append(TensorInfo(name=name, shape=shape, ggml_type=r.unpack("<I"), offset=r.unpack("<Q")))
    align = alignment_of(metadata, source)
    pos = fh.tell()
    data_offset = pos + (-pos % align)
    return GgufHeader(version=version, metadata=metadata, tensors=tensors, data_offset=data_offset)
