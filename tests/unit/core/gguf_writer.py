"""A minimal GGUF v3 writer for tests: enough to make small, valid headers and files."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, value: Any) -> bytes:
    if isinstance(value, str):
        return _str(key) + struct.pack("<I", 8) + _str(value)
    if isinstance(value, bool):
        return _str(key) + struct.pack("<I", 7) + struct.pack("<?", value)
    if isinstance(value, int):
        return _str(key) + struct.pack("<I", 4) + struct.pack("<I", value)
    if isinstance(value, float):
        return _str(key) + struct.pack("<I", 6) + struct.pack("<f", value)
    if isinstance(value, list):
        return _str(key) + struct.pack("<I", 9) + struct.pack("<IQ", 8, len(value)) + b"".join(_str(v) for v in value)
    raise TypeError(value)


def write_gguf(path: Path, metadata: dict[str, Any], tensors: list[tuple[str, tuple[int, ...], int]],
               *, with_data: bool = True, alignment: int = 32) -> int:
    """Write a GGUF with F32/F16 tensors (type ids 0/1); returns the data offset."""
    sizes = {0: 4, 1: 2}
    infos, offset = b"", 0
    for name, shape, gtype in tensors:
        infos += _str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        infos += struct.pack("<IQ", gtype, offset)
        n = 1
        for d in shape:
            n *= d
        offset += n * sizes[gtype]
        offset += -offset % alignment
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    head += b"".join(_kv(k, v) for k, v in metadata.items()) + infos
    data_offset = len(head) + (-len(head) % alignment)
    body = head + b"\0" * (data_offset - len(head))
    if with_data:
        body += bytes(range(256)) * (offset // 256) + bytes(offset % 256)
    path.write_bytes(body)
    return data_offset
