"""Malformed GGUF headers and a full disk under a twin: one line naming the fix, exit 2, no traceback."""

from __future__ import annotations

import errno
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack import safepath
from servepack.cli.main import cli
from servepack.errors import ModelError
from servepack.weights import twin as twin_mod
from servepack.weights.gguf import read_header
from servepack.weights.twin import make_twin, twin_marker

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
from gguf_writer import _str, write_gguf

ARRAY, UINT32, STRING, UINT8 = 9, 4, 8, 0
TENSOR = [("w", (64,), 0)]


def _raw(path: Path, kvs: bytes, n_kv: int, tensors: bytes = b"", n_tensors: int = 0, tail: bytes = b"") -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs + tensors + tail)
    return path


def _nested_arrays(depth: int) -> bytes:
    """One key whose value is an array of an array of ... `depth` deep, the innermost empty."""
    body = struct.pack("<I", ARRAY)
    for _ in range(depth - 1):
        body += struct.pack("<IQ", ARRAY, 1)
    body += struct.pack("<IQ", UINT8, 0)
    return _str("deep") + body


def _alignment(value: bytes, vtype: int) -> Callable[[Path], Path]:
    return lambda p: _raw(p, _str("general.alignment") + struct.pack("<I", vtype) + value, 1)


MALFORMED: list[tuple[str, Callable[[Path], Path], str]] = [
    ("alignment 0", _alignment(struct.pack("<I", 0), UINT32), "general.alignment is 0, not a power of two"),
    ("alignment 24", _alignment(struct.pack("<I", 24), UINT32), "general.alignment is 24"),
    ("alignment string", _alignment(_str("abc"), STRING), "general.alignment is 'abc'"),
    ("alignment array", _alignment(struct.pack("<IQ", UINT32, 1) + struct.pack("<I", 32), ARRAY),
     "general.alignment is [32]"),
    ("arrays nested 20,000 deep", lambda p: _raw(p, _nested_arrays(20_000), 1), "arrays nested deeper than 4"),
    ("array of 2^60 items", lambda p: _raw(p, _str("big") + struct.pack("<IIQ", ARRAY, UINT32, 1 << 60), 1),
     "truncated"),
    ("2^62 keys", lambda p: _raw(p, b"", 1 << 62), "truncated"),
    ("2^62 tensors", lambda p: _raw(p, b"", 0, n_tensors=1 << 62), "truncated"),
    ("100 dimensions", lambda p: _raw(p, b"", 0, _str("t") + struct.pack("<I", 100) + b"\0" * 900, 1),
     "has 100 dimensions"),
    ("string of 2^40 bytes", lambda p: _raw(p, struct.pack("<Q", 1 << 40) + b"\0" * 64, 1), "GGUF string of"),
    ("unknown value type", lambda p: _raw(p, _str("k") + struct.pack("<I", 77), 1), "unknown GGUF value type 77"),
    ("bad magic", lambda p: (p.write_bytes(b"\x89PNG" + b"\0" * 64), p)[1], "not a GGUF file"),
    ("binary noise", lambda p: (p.write_bytes(os.urandom(4096)), p)[1], "not a GGUF file"),
    ("empty", lambda p: (p.write_bytes(b""), p)[1], "truncated"),
]


@pytest.mark.parametrize(("label", "make", "expect"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_header_is_a_model_error(tmp_path: Path, label: str, make: Callable[[Path], Path],
                                             expect: str) -> None:
    with pytest.raises(ModelError) as info:
        read_header(make(tmp_path / "bad.gguf"))
    assert expect in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("label", "make", "expect"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_twinning_a_malformed_header_is_one_line_exit_2(tmp_path: Path, label: str, make: Callable[[Path], Path],
                                                        expect: str) -> None:
    src = make(tmp_path / "bad.gguf")
    result = CliRunner().invoke(cli, ["twin", str(src), str(tmp_path / "out.gguf")])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("servepack: error: ") and expect in lines[0], result.stderr
    assert not (tmp_path / "out.gguf").exists()


@pytest.mark.parametrize("alignment", [8, 32, 64, 4096])
def test_power_of_two_alignments_and_shallow_arrays_read(tmp_path: Path, alignment: int) -> None:
    f = tmp_path / "ok.gguf"
    offset = write_gguf(f, {"general.architecture": "llama", "general.alignment": alignment,
                            "tokenizer.ggml.tokens": ["a", "b"]}, TENSOR, alignment=alignment)
    h = read_header(f)
    assert h.data_offset == offset and offset % alignment == 0
    assert h.metadata["tokenizer.ggml.tokens"] == ["a", "b"]
    nested = _raw(tmp_path / "nested.gguf", _nested_arrays(4), 1)
    assert read_header(nested).metadata["deep"] == [[[[]]]]


def test_odd_metadata_types_do_not_break_the_summary(tmp_path: Path) -> None:
    f = tmp_path / "odd.gguf"
    write_gguf(f, {"general.architecture": "llama", "general.file_type": "Q4", "llama.context_length": "long",
                   "llama.expert_count": "many"}, TENSOR)
    s = read_header(f).summary()
    assert (s["quantization"], s["context_length"], s["expert_count"]) == ("file_type 'Q4'", None, None)


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src.gguf"
    write_gguf(src, {"general.architecture": "llama"}, [("w", (4096,), 0)])
    return src


@pytest.mark.parametrize("full_at", ["twin", "mark"])  # the disk fills writing the twin's bytes, or its mark
def test_a_disk_filling_up_mid_twin_is_one_line_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   full_at: str) -> None:
    out = tmp_path / "twins" / "t.gguf"
    opened: list[Path] = []

    def onto_dev_full(path: Path, mode: int = 0o644) -> int:  # the kernel's own ENOSPC: writes to /dev/full get it
        opened.append(path)
        path.touch()
        return os.open("/dev/full", os.O_WRONLY)

    # the twin's bytes go to a temp file made by safepath.Replacing; the mark is made new by the twin module
    monkeypatch.setattr(safepath if full_at == "twin" else twin_mod, "create_new", onto_dev_full)
    result = CliRunner().invoke(cli, ["twin", str(_source(tmp_path)), str(out)])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2
    line = result.stderr.strip()
    assert "\n" not in line and f"cannot write {out} (No space left on device)" in line
    assert "free some space or choose an output path on another disk" in line
    assert opened and not out.exists() and not twin_marker(out).exists()
    assert opened[0].name.startswith(".t.gguf.") if full_at == "twin" else opened == [twin_marker(out)]
    assert sorted(p.name for p in out.parent.iterdir()) == []  # the partial file (or half a mark) is gone too


def test_too_little_room_is_refused_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(twin_mod.shutil, "disk_usage", lambda _p: usage(10**6, 10**6 - 100, 100))
    out = tmp_path / "t.gguf"
    with pytest.raises(ModelError, match=r"only 0\.00 GB free at .*needs 0\.00 GB"):
        make_twin(_source(tmp_path), out, seed=1)
    assert not out.exists() and not twin_marker(out).exists()


def test_a_write_error_other_than_enospc_is_reported_the_same_way(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path) -> int:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(twin_mod, "create_new", refuse)
    with pytest.raises(ModelError, match=r"cannot write .*\(Read-only file system\)"):
        make_twin(_source(tmp_path), tmp_path / "t.gguf", seed=1)


def test_a_twin_on_a_disk_with_room_is_written(tmp_path: Path) -> None:
    out = tmp_path / "t.gguf"
    result = make_twin(_source(tmp_path), out, seed=1)
    assert out.stat().st_size == result.size_bytes and twin_marker(out).is_file()
