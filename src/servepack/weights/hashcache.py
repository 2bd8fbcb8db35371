"""sha256 of a file, hashed once per file identity and re-hashed whenever that identity changes.

The identity is (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns). Size and mtime alone can be kept by a
writer (`os.utime` puts mtime back); ctime cannot be set from user space and moves on every write, so a
cached hash is only reused for the very bytes it was computed from. The identity is taken from the open
file before and after hashing: a file that changed while it was read is hashed, never cached.

The kernel stamps ctime from a coarse clock (one tick, up to 10 ms; whole seconds on some filesystems), so
a write in the same tick as the hashed state can keep ctime too. As git does for "racily clean" files, a
hash is cached only once the file's ctime is RACY_NS older than the clock: a later write then always
carries a later ctime.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pydantic import ConfigDict, ValidationError

from servepack.errors import ModelError
from servepack.progress import ByteProgress
from servepack.safepath import open_regular, replace_bytes
from servepack.strict import Strict
from servepack.weights.gguf import MODEL_HINT

HASH_SCHEMA_VERSION = "servepack.hash/v1"
CHUNK = 8 << 20
RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class FileIdentity:
    """What must be unchanged for a cached hash to still describe a file's bytes."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    @property
    def key(self) -> str:
        return f"{self.dev}-{self.ino}"


class HashEntry(Strict):
    """One cached hash: the file identity it was computed for and the sha256 of its bytes."""

    model_config = ConfigDict(frozen=True)

    schema_version: str = HASH_SCHEMA_VERSION
    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    sha256: str
    path: str

    def identity(self) -> FileIdentity:
        return FileIdentity(self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)


def hash_open_file(fh: BinaryIO, total: int, progress: ByteProgress | None = None) -> str:
    """sha256 of an open binary file from where it stands to its end."""
    h = hashlib.sha256()
    done = 0
    while chunk := fh.read(CHUNK):
        h.update(chunk)
        done += len(chunk)
        if progress:
            progress(done, total)
    return h.hexdigest()


class HashCache:
    """Hashes keyed by (device, inode) under `root`, each valid only for the identity recorded with it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hashed = 0  # files hashed by this instance (a cache miss or a forced re-hash)

    @classmethod
    def under(cls, cache_dir: Path) -> HashCache:
        return cls(cache_dir / "hashes")

    def _entry_path(self, ident: FileIdentity) -> Path:
        return self.root / f"{ident.key}.json"

    def lookup(self, path: Path) -> str | None:
        """The cached sha256 of `path` when its identity is unchanged since it was hashed; else None."""
        try:
            ident = FileIdentity.of(os.stat(path))
            entry = HashEntry.model_validate_json(self._entry_path(ident).read_bytes())
        except (OSError, ValidationError, ValueError):
            return None
        return entry.sha256 if entry.identity() == ident else None

    def record(self, path: Path, ident: FileIdentity, sha: str) -> None:
        """Remember `sha` for the file of identity `ident`; a cache that cannot be written is only slower.

        A file changed within RACY_NS of now is not remembered (see the module docstring): it is hashed again
        on its next use.
        """
        if time.time_ns() - ident.ctime_ns < RACY_NS:
            return
        entry = HashEntry(dev=ident.dev, ino=ident.ino, size=ident.size, mtime_ns=ident.mtime_ns,
                          ctime_ns=ident.ctime_ns, sha256=sha, path=str(path))
        with contextlib.suppress(OSError):
            self.root.mkdir(parents=True, exist_ok=True)
            replace_bytes(self._entry_path(ident), (json.dumps(entry.model_dump()) + "\n").encode())

    def sha256(self, path: Path, *, force: bool = False, progress: ByteProgress | None = None) -> str:
        """sha256 of `path`'s bytes: from the cache when its identity is unchanged, else hashed now."""
        if not force:
            cached = self.lookup(path)
            if cached is not None:
                return cached
        with open_regular(path, MODEL_HINT, error=ModelError) as fh:
            before = FileIdentity.of(os.fstat(fh.fileno()))
            sha = hash_open_file(fh, before.size, progress)
            after = FileIdentity.of(os.fstat(fh.fileno()))
        self.hashed += 1
        if before == after:
            self.record(path, after, sha)
        return sha
