"""`servepack pull`: a pack's pinned Hugging Face files through huggingface_hub, verified against the pin.

The download itself is `hf_hub_download` at the pinned revision (HF_ENDPOINT picks the server); it resumes
a broken transfer with HTTP Range. Around it: a verified file already there is used as is (offline too),
the disk headroom the pack asks for is checked first, a sha256 mismatch keeps the bad bytes aside and
fails, and the pack's mirror repository is tried only when the primary fails.
"""

from __future__ import annotations

import importlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from servepack.errors import ModelError, UsageError
from servepack.packs import LoadedPack
from servepack.packs.schema import HfSource
from servepack.progress import Progress, quiet
from servepack.safepath import inside, join_inside
from servepack.settings import Settings
from servepack.weights.hashcache import HashCache
from servepack.weights.resolve import hf_expected_path, hf_hub_cache

Action = Literal["cached", "downloaded", "mirror"]
GB = 1e9
# a mirror has its own history: it is fetched at its default branch and trusted only through the sha256
MIRROR_REVISION = "main"


class ChecksumMismatch(ModelError):
    """Downloaded bytes differ from the pinned sha256 (the bad file is kept aside)."""

    exit_code = 1


@dataclass(frozen=True)
class PulledFile:
    """One file of the pack as it now lies on disk."""

    name: str
    repo: str
    file: str
    revision: str
    revision_is_commit: bool
    commit: str | None
    path: Path
    sha256: str
    pin_sha256: str | None
    size_bytes: int
    action: Action
    seconds: float
    notes: tuple[str, ...] = ()

    @property
    def verified(self) -> bool:
        return self.pin_sha256 is not None and self.pin_sha256 == self.sha256

    @property
    def claimable(self) -> bool:
        """Claims need a commit revision and bytes that match a pinned sha256."""
        return self.revision_is_commit and self.verified

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "repo": self.repo, "file": self.file, "revision": self.revision,
            "revision_is_commit": self.revision_is_commit, "commit": self.commit, "path": str(self.path),
            "sha256": self.sha256, "pin_sha256": self.pin_sha256, "verified": self.verified,
            "claimable": self.claimable, "size_bytes": self.size_bytes, "action": self.action,
            "seconds": round(self.seconds, 3), "notes": list(self.notes),
        }


@dataclass(frozen=True)
class PullResult:
    pack_id: str
    endpoint: str
    target_dir: Path
    files: list[PulledFile] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"pack": self.pack_id, "endpoint": self.endpoint, "target_dir": str(self.target_dir),
                "files": [f.as_dict() for f in self.files]}


@dataclass(frozen=True)
class _Want:
    name: str
    src: HfSource
    pin: str | None
    size: int | None


@dataclass(frozen=True)
class _Where:
    endpoint: str
    cache_dir: Path
    local_dir: Path | None
    offline: bool
    hashes: HashCache
    force_hash: bool = False

    def root(self, repo: str) -> Path:
        """The directory every file of `repo` is written under."""
        return self.local_dir if self.local_dir is not None else repo_cache_dir(self.cache_dir, repo)


def _hub() -> Any:
    return importlib.import_module("huggingface_hub")


def _constants() -> Any:
    return importlib.import_module("huggingface_hub.constants")


def _offline() -> bool:
    # read at call time: huggingface_hub reads HF_HUB_OFFLINE only once, at import
    return bool(_constants().HF_HUB_OFFLINE) or Settings.load().hf_offline


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a failed transfer raises: OSError (HfHubHTTPError, LocalEntryNotFoundError) or the HTTP client's."""
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx", "requests"):
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def _short(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def repo_cache_dir(cache_dir: Path, repo: str) -> Path:
    return cache_dir / ("models--" + repo.replace("/", "--"))


def cached_path(src: HfSource, *, cache_dir: Path, local_dir: Path | None) -> Path:
    """Where `src` lies once pulled (see `resolve.hf_expected_path`)."""
    return hf_expected_path(src, local_dir, cache_dir)


def _commit_of(path: Path, cache_dir: Path, local_dir: Path | None) -> str | None:
    if local_dir is not None:
        return None
    try:
        rel = path.relative_to(cache_dir)
    except ValueError:
        return None
    parts = rel.parts
    return parts[2] if len(parts) > 3 and parts[1] == "snapshots" else None


def _free_bytes(path: Path) -> tuple[Path, int]:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def check_headroom(target: Path, min_free_gb: float, need_bytes: int, pack_id: str) -> None:
    """Refuse to start a download when the target's disk has less free space than the pack asks for."""
    probe, free = _free_bytes(target)
    need = max(min_free_gb * GB, float(need_bytes))
    if free < need:
        why = f"pull.min_free_gb = {min_free_gb:g}" if min_free_gb * GB >= need_bytes else "the files' size"
        raise ModelError(
            f"only {free / GB:,.1f} GB free at {probe}; pack {pack_id} needs ≥ {need / GB:,.1f} GB ({why}); "
            "free some space or pass --local-dir on a larger disk"
        )


def _bar_class(label: str, say: Progress, every_s: float = 2.0) -> type:
    """A tqdm class for hf_hub_download that reports bytes, percent and rate as progress lines."""
    base = importlib.import_module("huggingface_hub.utils").tqdm

    class _Bar(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True  # no terminal bar: servepack prints its own lines
            super().__init__(*args, **kwargs)
            self.sp_done = int(kwargs.get("initial") or 0)
            self.sp_first = self.sp_done
            self.sp_total = kwargs.get("total")
            self.sp_t0 = self.sp_last = time.monotonic()

        def update(self, n: float | None = 1) -> bool | None:
            self.sp_done += int(n or 0)
            now = time.monotonic()
            finished = self.sp_total is not None and self.sp_done >= self.sp_total
            if now - self.sp_last >= every_s or finished:
                self.sp_last = now
                rate = (self.sp_done - self.sp_first) / max(now - self.sp_t0, 1e-6)
                total = f" / {self.sp_total / 1e6:,.1f} MB ({100 * self.sp_done / self.sp_total:.0f}%)" \
                    if self.sp_total else " MB"
                say(f"{label}: {self.sp_done / 1e6:,.1f}{total} · {rate / 1e6:,.1f} MB/s")
            return None

    return _Bar


def _hash(path: Path, label: str, say: Progress, where: _Where, *, force: bool = False) -> str:
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 5 or done == total:
            last[0] = now
            say(f"{label}: sha256 {done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    return where.hashes.sha256(path, force=force or where.force_hash, progress=report)


def set_aside(path: Path, sha: str, root: Path) -> Path:
    """Move bad bytes to `<path>.bad-<sha12>` beside the expected path; nothing is deleted.

    Both the bytes moved and where they go must lie inside `root`: a link out of the cache is refused,
    so a host file is never moved.
    """
    dest = inside(root, path.with_name(f"{path.name}.bad-{sha[:12]}"), "set-aside file")
    real = inside(root, path.resolve(), "model file")
    os.replace(real, dest)
    if path.is_symlink():
        path.unlink()  # the cache pointer now dangles; the bytes are in `dest`
    return dest


def _download(repo: str, src: HfSource, revision: str, where: _Where, label: str, say: Progress) -> Path:
    """hf_hub_download into the cache or local_dir; the target is checked to stay inside it first and after."""
    root = where.root(repo)
    if where.local_dir is not None:
        join_inside(root, src.file, "model.source.file")
    else:
        join_inside(root / "snapshots", f"{revision}/{src.file}", "model.source.file", root=root)
    kwargs: dict[str, Any] = {"revision": revision, "endpoint": where.endpoint,
                              "tqdm_class": _bar_class(label, say)}
    if where.local_dir is not None:
        kwargs["local_dir"] = str(where.local_dir)
    else:
        kwargs["cache_dir"] = str(where.cache_dir)
    return inside(root, Path(_hub().hf_hub_download(repo, src.file, **kwargs)), "downloaded file")


def _place_in_primary_cache(got: Path, want: _Want, where: _Where, sha: str) -> Path:
    """Put verified mirror bytes where the primary's snapshot would hold them (blob named by sha256)."""
    if where.local_dir is not None or not want.src.revision_is_commit:
        return got
    storage = repo_cache_dir(where.cache_dir, want.src.repo)
    blob = inside(storage, storage / "blobs" / sha, "blob")
    pointer = join_inside(storage / "snapshots", f"{want.src.revision}/{want.src.file}", "snapshot file",
                          root=storage)
    blob.parent.mkdir(parents=True, exist_ok=True)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if not blob.exists():
        try:
            os.link(got.resolve(), blob)
        except OSError:
            shutil.copyfile(got.resolve(), blob)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    except OSError:
        shutil.copyfile(blob, pointer)
    return pointer


def _verified_download(got: Path, want: _Want, repo: str, where: _Where, say: Progress) -> str:
    # freshly written bytes: hashed now, whatever the cache holds for a reused inode
    sha = _hash(got, want.name, say, where, force=True)
    if want.pin and sha != want.pin:
        bad = set_aside(got, sha, where.root(repo))
        raise ChecksumMismatch(
            f"{repo}/{want.src.file}: downloaded sha256 {sha} does not match the pin {want.pin}; "
            f"the bytes are kept at {bad}; check the pack's sha256 or the server"
        )
    return sha


def _pull_one(want: _Want, where: _Where, say: Progress) -> PulledFile:
    src = want.src
    started = time.monotonic()
    notes: list[str] = []
    if not src.revision_is_commit:
        notes.append(f"revision {src.revision!r} is a branch, not a commit: never claimable")
    if want.pin is None:
        notes.append("no sha256 pinned: bytes unverified, never claimable")
    target = cached_path(src, cache_dir=where.cache_dir, local_dir=where.local_dir)

    def done(path: Path, sha: str, action: Action, repo: str) -> PulledFile:
        return PulledFile(
            name=want.name, repo=repo, file=src.file, revision=src.revision,
            revision_is_commit=src.revision_is_commit, commit=_commit_of(path, where.cache_dir, where.local_dir),
            path=path, sha256=sha, pin_sha256=want.pin, size_bytes=path.stat().st_size, action=action,
            seconds=time.monotonic() - started, notes=tuple(notes),
        )

    cached_sha: str | None = None
    if target.is_file():
        cached_sha = _hash(target, want.name, say, where)
        good = want.pin is None or cached_sha == want.pin
        # a commit never changes, so a verified copy is final; a branch may have moved: ask when online
        if good and (src.revision_is_commit or where.offline):
            say(f"{want.name}: {target} already verified")
            return done(target, cached_sha, "cached", src.repo)
        if not good:
            bad = set_aside(target, cached_sha, where.root(src.repo))
            notes.append(f"a file with sha256 {cached_sha} ≠ pin was moved aside to {bad}")
            say(f"{want.name}: existing file does not match the pin; moved aside to {bad}")
            cached_sha = None
    if where.offline:
        raise ModelError(
            f"offline (HF_HUB_OFFLINE=1): {src.repo}@{src.revision[:12]}/{src.file} is not at {target}; "
            "pull it once online, or pass --model PATH"
        )
    errors = _transport_errors()
    say(f"{want.name}: {src.repo}@{src.revision[:12]}/{src.file} from {where.endpoint}")
    try:
        got = _download(src.repo, src, src.revision, where, want.name, say)
    except errors as exc:
        primary_error: BaseException = exc
    else:
        return done(got, _verified_download(got, want, src.repo, where, say), "downloaded", src.repo)
    if cached_sha is not None:
        notes.append(f"could not check branch {src.revision!r} ({_short(primary_error)}); used the cached copy")
        return done(target, cached_sha, "cached", src.repo)
    if not src.mirror_repo:
        raise ModelError(
            f"cannot download {src.repo}@{src.revision[:12]}/{src.file} from {where.endpoint} "
            f"({_short(primary_error)}) and it is not at {target}"
        )
    if not want.pin:
        raise ModelError(
            f"primary {src.repo} failed ({_short(primary_error)}); the mirror {src.mirror_repo} is accepted only "
            "against a pinned sha256, and the pack pins none"
        )
    say(f"{want.name}: primary {src.repo} failed ({_short(primary_error)}); trying mirror {src.mirror_repo}")
    try:
        got = _download(src.mirror_repo, src, MIRROR_REVISION, where, f"{want.name} (mirror)", say)
    except errors as exc:
        raise ModelError(
            f"cannot download {src.file}: primary {src.repo}: {_short(primary_error)}; "
            f"mirror {src.mirror_repo}: {_short(exc)}"
        ) from None
    sha = _verified_download(got, want, src.mirror_repo, where, say)
    notes.append(f"primary failed ({_short(primary_error)}); bytes from mirror {src.mirror_repo}, sha256 = pin")
    placed = _place_in_primary_cache(got, want, where, sha)
    return done(placed, sha, "mirror", src.mirror_repo)


def pull_model(
    loaded: LoadedPack,
    *,
    local_dir: Path | None = None,
    with_draft: bool = False,
    progress: Progress | None = None,
) -> PullResult:
    """Download (or find, verified) the pack's model file, and its `model.extra` files with `with_draft`."""
    say = progress or quiet
    pack = loaded.pack
    src = pack.model.source
    if not isinstance(src, HfSource):
        raise UsageError(
            f"pack {pack.id}: model.source.kind is {src.kind!r}; `servepack pull` fetches only kind \"hf\" "
            "(a pypi model is assembled by `servepack run`, a file needs no pull, an hf-repo or dir model is "
            "loaded by its engine itself)"
        )
    wants = [_Want("model", src, pack.model.sha256, pack.model.size_bytes)]
    if with_draft:
        for extra in pack.model.extra:
            if isinstance(extra.source, HfSource):
                wants.append(_Want(extra.name, extra.source, extra.sha256, extra.size_bytes))
            else:
                say(f"{extra.name}: source kind {extra.source.kind!r} needs no pull")
    const = _constants()
    settings = Settings.load()
    where = _Where(
        endpoint=settings.hf_endpoint or const.ENDPOINT.rstrip("/"),
        cache_dir=hf_hub_cache(),
        local_dir=local_dir.expanduser().resolve() if local_dir else None,
        offline=_offline(),
        hashes=HashCache.under(settings.cache_dir),
        force_hash=settings.verify_model,
    )
    target_dir = where.local_dir or where.cache_dir
    missing = [w for w in wants
               if not cached_path(w.src, cache_dir=where.cache_dir, local_dir=where.local_dir).is_file()]
    if missing and not where.offline:
        check_headroom(target_dir, pack.pull.min_free_gb, sum(w.size or 0 for w in missing), pack.id)
    files = [_pull_one(w, where, say) for w in wants]
    return PullResult(pack_id=pack.id, endpoint=where.endpoint, target_dir=target_dir, files=files)
