"""A receipt's model hash is a hash of the bytes served: cached per file identity, re-hashed when it moves."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from disk_full import fill_disk
from servepack.engine.locate import EngineFacts
from servepack.errors import ModelError
from servepack.packs.schema import FileSource, ModelPin
from servepack.records.policy import claim_preconditions
from servepack.records.receipt import HardwareAttribution
from servepack.weights import hashcache
from servepack.weights.resolve import ResolvedModel, resolve_model

DATA = b"GGUF" + bytes(range(256)) * 64


@pytest.fixture
def hash_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the hash cache reads and hashes; a short racy window so a test need not wait seconds."""
    calls: list[Path] = []
    real = hashcache.hash_open_file

    def counting(fh, total, progress=None):  # type: ignore[no-untyped-def]
        calls.append(Path(fh.name))
        return real(fh, total, progress)

    monkeypatch.setattr(hashcache, "hash_open_file", counting)
    monkeypatch.setattr(hashcache, "RACY_NS", 50_000_000)
    return calls


def _settled(path: Path) -> Path:
    """Wait (bounded) until the clock is past the racy window of the file's ctime, as an old file would be."""
    deadline = time.monotonic() + 5
    while time.time_ns() - path.stat().st_ctime_ns < hashcache.RACY_NS + 20_000_000:
        assert time.monotonic() < deadline, "clock did not advance"
        time.sleep(0.01)
    return path


def _model(tmp_path: Path, data: bytes = DATA) -> Path:
    f = tmp_path / "models" / "m.gguf"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(data)
    return _settled(f)


def _pin(path: Path | str, data: bytes | None = DATA) -> ModelPin:
    return ModelPin(name="m", quant="Q", file="m.gguf", model_instance_id="m",
                    source=FileSource(kind="file", path=str(path)),
                    sha256=hashlib.sha256(data).hexdigest() if data is not None else None)


def _corrupt_keeping_size_and_mtime(path: Path) -> None:
    before = path.stat()
    with path.open("r+b") as fh:
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns  # what gives the change away


def _resolve(tmp_path: Path, pin: ModelPin, **kw: object) -> ResolvedModel:
    return resolve_model(pin, cache_dir=tmp_path / "cache", pack_dir=tmp_path, **kw)  # type: ignore[arg-type]


def test_an_unchanged_file_is_hashed_once(tmp_path: Path, hash_calls: list[Path]) -> None:
    f = _model(tmp_path)
    first = _resolve(tmp_path, _pin(f))
    second = _resolve(tmp_path, _pin(f))
    assert first.sha256 == second.sha256 == hashlib.sha256(DATA).hexdigest()
    assert (first.hashed_now, second.hashed_now) == (True, False)
    assert hash_calls == [f]


def test_a_byte_corrupted_under_kept_size_and_mtime_is_found(tmp_path: Path, hash_calls: list[Path]) -> None:
    f = _model(tmp_path)
    pin = _pin(f)
    assert _resolve(tmp_path, pin).pin_match is True
    _corrupt_keeping_size_and_mtime(f)
    real = hashlib.sha256(f.read_bytes()).hexdigest()
    with pytest.raises(ModelError) as info:
        _resolve(tmp_path, pin)
    assert f"sha256 {real} does not match the pin {pin.sha256}" in str(info.value)
    assert len(hash_calls) == 2


def test_a_corrupted_override_is_recorded_with_its_real_hash_and_refused_for_claims(
        tmp_path: Path, hash_calls: list[Path]) -> None:
    f = _model(tmp_path)
    pin = _pin("elsewhere.gguf")
    assert _resolve(tmp_path, pin, model_path=f).pin_match is True
    _corrupt_keeping_size_and_mtime(f)
    got = _resolve(tmp_path, pin, model_path=f)
    real = hashlib.sha256(f.read_bytes()).hexdigest()
    assert got.sha256 == real != pin.sha256
    assert got.pin_match is False and got.hashed_now is True
    engine = EngineFacts(name="llama-server", path=tmp_path / "llama-server", chosen_by="flag", sha256="0" * 64,
                         version_text="version: 1 (abc)", package=None, package_version=None, commit=None,
                         pin_match=True, pin_reason="test")
    hw = HardwareAttribution(detected_id="cpu-x", label="x", target_id="cpu-x", target_match=True, failed_rules=[],
                             attributed_id="cpu-x")
    loaded = type("Loaded", (), {"pack": type("P", (), {"model": pin})()})()
    failures = claim_preconditions(loaded, hw, engine, got, "http://127.0.0.1:1",  # type: ignore[arg-type]
                                   build=None, random_weights=False)
    assert failures == [f"model pin not matched: sha256 {real[:12]}… ≠ pin {pin.sha256[:12]}…"]  # type: ignore[index]


def test_force_hash_and_verify_model_read_the_bytes_again(tmp_path: Path, hash_calls: list[Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    f = _model(tmp_path)
    _resolve(tmp_path, _pin(f))
    assert _resolve(tmp_path, _pin(f)).hashed_now is False
    assert _resolve(tmp_path, _pin(f), force_hash=True).hashed_now is True  # what a claim run passes
    monkeypatch.setenv("SERVEPACK_VERIFY_MODEL", "1")  # what --verify-model sets for its command
    assert _resolve(tmp_path, _pin(f)).hashed_now is True
    assert _resolve(tmp_path, _pin(f), force_hash=False).hashed_now is False
    assert len(hash_calls) == 3


@pytest.mark.parametrize("change", ["rewrite", "replace", "chmod"])
def test_any_change_of_identity_re_hashes(tmp_path: Path, hash_calls: list[Path], change: str) -> None:
    f = _model(tmp_path)
    _resolve(tmp_path, _pin(f, None))
    if change == "rewrite":
        f.write_bytes(DATA)
    elif change == "replace":
        other = tmp_path / "models" / "new"
        other.write_bytes(DATA)
        os.replace(other, f)  # same bytes, another inode
    else:
        f.chmod(0o600)
    _settled(f)
    assert _resolve(tmp_path, _pin(f, None)).hashed_now is True
    assert _resolve(tmp_path, _pin(f, None)).hashed_now is False
    assert len(hash_calls) == 2


def test_a_file_changed_within_the_racy_window_is_not_cached(tmp_path: Path, hash_calls: list[Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    f = _model(tmp_path)
    monkeypatch.setattr(hashcache, "RACY_NS", 3_600 * 10**9)  # every file is "just written"
    assert _resolve(tmp_path, _pin(f)).hashed_now is True
    assert _resolve(tmp_path, _pin(f)).hashed_now is True
    assert not list((tmp_path / "cache" / "hashes").glob("*.json"))


def test_a_damaged_cache_entry_means_hashing_again(tmp_path: Path, hash_calls: list[Path]) -> None:
    f = _model(tmp_path)
    _resolve(tmp_path, _pin(f))
    (entry,) = (tmp_path / "cache" / "hashes").glob("*.json")
    entry.write_bytes(b"\xff\xfe not json")
    again = _resolve(tmp_path, _pin(f))
    assert again.hashed_now is True and again.pin_match is True
    assert _resolve(tmp_path, _pin(f)).hashed_now is False  # the entry was written anew


def test_a_hash_cache_the_disk_cannot_take_is_only_slower_and_leaves_no_temp(tmp_path: Path, hash_calls: list[Path],
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    f = _model(tmp_path)
    _resolve(tmp_path, _pin(f))
    hashes = tmp_path / "cache" / "hashes"
    (entry,) = hashes.glob("*.json")
    earlier = entry.read_bytes()
    _corrupt_keeping_size_and_mtime(f)  # a new identity: its entry is written anew, onto a full disk
    _settled(f)
    refused = fill_disk(monkeypatch)
    real = hashlib.sha256(f.read_bytes()).hexdigest()
    with pytest.raises(ModelError, match=f"sha256 {real} does not match"):
        _resolve(tmp_path, _pin(f))
    assert refused and all(Path(p).parent == hashes for p in refused)
    assert sorted(p.name for p in hashes.iterdir()) == [entry.name] and entry.read_bytes() == earlier
