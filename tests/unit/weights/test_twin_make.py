"""Shape twins: the source's header, random tensor bytes of the right length, and the mark beside them."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from disk_full import fill_disk
from servepack.errors import ModelError, UsageError
from servepack.weights.gguf import read_header
from servepack.weights.twin import fetch_header, is_twin, make_twin, twin_marker


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path: Path, tensors: list[tuple[str, tuple[int, ...], int]], *, data: bool = True) -> int:
    """A small GGUF v3 (F32 = 0 / F16 = 1 / Q8_0 = 8 tensors, each padded to 32 bytes); returns the data offset."""
    sizes = {0: (1, 4), 1: (1, 2), 8: (32, 34)}
    meta = _s("general.architecture") + struct.pack("<I", 8) + _s("llama")
    meta += _s("general.alignment") + struct.pack("<I", 4) + struct.pack("<I", 32)
    parts, offset = [], 0
    for name, shape, gtype in tensors:
        parts.append(_s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape))
        parts.append(struct.pack("<IQ", gtype, offset))
        n = 1
        for d in shape:
            n *= d
        block, size = sizes[gtype]
        offset += n // block * size
        offset += -offset % 32
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 2) + meta + b"".join(parts)
    data_offset = len(head) + (-len(head) % 32)
    body = head + b"\0" * (data_offset - len(head))
    if data:
        body += bytes((i * 7) % 251 for i in range(offset))
    path.write_bytes(body)
    return data_offset


TENSORS = [("tok_embd", (64, 100), 8), ("norm", (64,), 0), ("out", (64, 33), 1)]


def test_twin_has_the_source_size_header_and_mark(tmp_path: Path) -> None:
    src = tmp_path / "model.gguf"
    offset = write_gguf(src, TENSORS)
    out = tmp_path / "twin" / "model-twin.gguf"
    result = make_twin(src, out, seed=1)
    assert out.stat().st_size == src.stat().st_size == result.size_bytes
    assert out.read_bytes()[:offset] == src.read_bytes()[:offset]
    assert out.read_bytes()[offset:] != src.read_bytes()[offset:]
    assert read_header(out).tensors == read_header(src).tensors
    assert is_twin(out) and not is_twin(src)
    mark = json.loads(twin_marker(out).read_text())
    assert mark["random_weights"] is True and mark["note"] == "speed only, never smoke or quality"
    assert mark["source_sha256_header"] == hashlib.sha256(src.read_bytes()[:offset]).hexdigest()
    assert mark["source"] == str(src.resolve()) and mark["schema_version"] == "servepack.twin/v1"


def test_seeded_twins_repeat_and_floats_stay_finite(tmp_path: Path) -> None:
    src = tmp_path / "model.gguf"
    offset = write_gguf(src, [("w", (4096,), 0)])
    a, b = make_twin(src, tmp_path / "a.gguf", seed=5), make_twin(src, tmp_path / "b.gguf", seed=5)
    assert a.path.read_bytes() == b.path.read_bytes()
    floats = struct.unpack(f"<{4096}f", a.path.read_bytes()[offset:offset + 4 * 4096])
    assert all(abs(v) < 2.0 for v in floats), "no Inf/NaN: the top exponent bit is cleared"
    assert len(set(floats)) > 4000


def test_header_only_source_gives_a_full_size_twin(tmp_path: Path) -> None:
    full = tmp_path / "model.gguf"
    offset = write_gguf(full, TENSORS)
    header = tmp_path / "model.header"
    header.write_bytes(full.read_bytes()[: offset - 5])  # even without the alignment padding
    twin = make_twin(header, tmp_path / "twin.gguf", seed=None)
    assert twin.size_bytes == full.stat().st_size
    assert twin.path.read_bytes()[:offset] == full.read_bytes()[:offset]
    assert is_twin(twin.path)


def test_twin_never_overwrites(tmp_path: Path) -> None:
    src = tmp_path / "model.gguf"
    write_gguf(src, TENSORS)
    out = tmp_path / "t.gguf"
    out.write_bytes(b"keep")
    with pytest.raises(UsageError, match="already exists"):
        make_twin(src, out, seed=0)
    assert out.read_bytes() == b"keep" and not twin_marker(out).exists()


def test_fetch_header_grows_the_range_until_the_header_parses(tmp_path: Path) -> None:
    import httpx

    src = tmp_path / "model.gguf"
    many = [(f"blk.{i}.weight.with.a.rather.long.name", (32,), 0) for i in range(40_000)]
    offset = write_gguf(src, many, data=False)
    assert offset > 2 << 20, "the header alone is larger than the first range"
    blob = src.read_bytes() + b"\1" * 64
    ranges: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        rng = request.headers["Range"]
        ranges.append(rng)
        start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
        return httpx.Response(206, content=blob[start : end + 1])

    transport = httpx.MockTransport(handler)
    orig = httpx.Client.__init__

    def client_init(self: httpx.Client, *args: object, **kwargs: object) -> None:
        kwargs["transport"] = transport
        orig(self, *args, **kwargs)  # type: ignore[arg-type]

    mp = pytest.MonkeyPatch()
    mp.setattr(httpx.Client, "__init__", client_init)
    try:
        n = fetch_header("http://127.0.0.1:9/acme/m/resolve/abc/model.gguf", tmp_path / "h.gguf")
    finally:
        mp.undo()
    assert n == offset and ranges == ["bytes=0-1048575", "bytes=0-2097151", "bytes=0-4194303"]
    assert (tmp_path / "h.gguf").read_bytes() == src.read_bytes()[:offset]


def test_a_twin_the_disk_cannot_take_leaves_no_temp_and_no_mark(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "model.gguf"
    write_gguf(src, TENSORS)
    out = tmp_path / "twin" / "t.gguf"
    refused = fill_disk(monkeypatch, room=64)  # the header's start fits, not the rest
    with pytest.raises(ModelError, match=r"cannot write .*t\.gguf \(No space left on device\); it needs"):
        make_twin(src, out, seed=1)
    assert refused and Path(refused[0]).parent == out.parent
    assert list(out.parent.iterdir()) == []  # no twin, no temp file, and no mark without a twin
    monkeypatch.undo()
    assert make_twin(src, out, seed=1).size_bytes == src.stat().st_size and is_twin(out)
