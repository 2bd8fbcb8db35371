"""Append-only results directories: every file written atomically (temp + rename), never overwritten.

A command's --out is a new folder or an existing empty one (`check_new_out`, `ResultsDir.create`): never a file, a
link, or a folder holding anything, so no file of the user's is scrubbed, hashed or written beside.

A results directory is sealed once its receipt is written: nothing (no export, no other run's --out) is written
inside a directory that holds a receipt.json, nor below one. Before a run starts, its directory is checked to be
writable with headroom; a write that fails mid-run (disk full, made read-only) raises `ResultsWriteError`, which
the session turns into a failed receipt.

Every byte written through here (`write_bytes_atomic`, `dump_json`, `JsonlWriter`, `scrubbed`) passes one redaction:
each secret value this process was given (`register_secrets`: a preset's or a record's `--api-key`, the keys an
`--api-key-file` holds, ...) is replaced by `<redacted>`, whatever file it would land in (receipt, tune.json,
trials.jsonl, reproduce.json, capacity.json, registry exports, MEASURED.md, the HTML report).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any, TypeGuard

from servepack.errors import ResultsWriteError, UsageError

if TYPE_CHECKING:
    from pydantic import BaseModel

# The file whose presence seals a results directory (records.receipt.RECEIPT_NAME).
SEAL_NAME = "receipt.json"
# Free space a results directory must have before a run starts: timelines, raw samples, logs and the receipt.
MIN_FREE_BYTES = 64 << 20
MIB = 1 << 20
REDACTED = "<redacted>"
# A value shorter than this is not scrubbed from whole files: it could be part of a hash or a figure. Flags and argv
# are redacted by name too (servepack.redact), whatever the value's length.
MIN_SECRET_LEN = 8
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()


def register_secrets(values: Iterable[str]) -> None:
    """Secret values this process holds: from now on no file written through this module contains them (those at
    least MIN_SECRET_LEN long), and no internal error servepack shows (`registered_secrets`, redact)."""
    with _SECRETS_LOCK:
        for value in values:
            if isinstance(value, str) and value:
                _SECRETS.add(value)
                escaped = json.dumps(value)[1:-1]  # as it appears inside a JSON string
                if escaped != value:
                    _SECRETS.add(escaped)


def registered_secrets(min_len: int = MIN_SECRET_LEN) -> list[str]:
    """The secret values registered so far that are at least `min_len` long, longest first."""
    with _SECRETS_LOCK:
        return sorted((v for v in _SECRETS if len(v) >= min_len), key=lambda v: (-len(v), v))


def scrubbed(data: bytes) -> bytes:
    """`data` with every registered secret value replaced by REDACTED (longest first, so none is left in part)."""
    secrets = registered_secrets()
    for value in secrets:
        raw = value.encode()
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    return data


def scrubbed_text(text: str) -> str:
    return scrubbed(text.encode()).decode()



def sealed_run(path: Path) -> Path | None:
    """The finished results directory (one holding receipt.json) that `path` is or lies inside, links resolved."""
    real = Path(os.path.realpath(path))
    for d in (real, *real.parents):
        with contextlib.suppress(OSError):
            if (d / SEAL_NAME).is_file():
                return d
    return None


def refuse_sealed(path: Path, what: str) -> None:
    """UsageError when `path` would write into a finished results directory."""
    run = sealed_run(path)
    if run is not None:
        where = "is" if Path(os.path.realpath(path)) == run else "lies inside"
        raise UsageError(f"{what} {path} {where} the finished results directory {run} (it has a receipt); results "
                         "directories are sealed, so write it somewhere outside")


def write_problem(exc: OSError) -> str:
    """A failed write's cause in a few words: "the disk is full", "the filesystem is read-only", ..."""
    if isinstance(exc, ResultsWriteError):
        return exc.reason
    why = exc.strerror or type(exc).__name__
    return {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
            errno.EROFS: "the filesystem is read-only", errno.EACCES: "permission denied",
            errno.EPERM: "not permitted (immutable?)"}.get(exc.errno or 0, why)


def _write_failed(path: Path, exc: OSError) -> ResultsWriteError:
    hint = write_problem(exc)
    err = ResultsWriteError(f"cannot write {path.name} in {path.parent} ({hint}); measuring stopped, what was "
                            "already written is kept")
    err.reason = hint
    return err


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def rfc3339(ts: datetime) -> str:
    """UTC timestamp as RFC 3339 with a Z and millisecond precision."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _tempfile() -> ModuleType:
    """`tempfile`, imported when a file is first written: a command that writes none (`registry list`) starts
    without it (and the shutil and random it loads)."""
    import tempfile

    return tempfile


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write `data` to `path` via a temp file and rename; refuse to replace an existing file."""
    if path.exists() or path.is_symlink():
        raise UsageError(f"{path} exists; results are append-only, choose a new --out directory")
    if path.name != SEAL_NAME:
        refuse_sealed(path.parent, "writing")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _tempfile().mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise _write_failed(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(scrubbed(data))
            fh.flush()
            os.fsync(fh.fileno())
        # link() fails if the target appeared meanwhile, so nothing is ever replaced.
        os.link(tmp, path)
    except FileExistsError:
        raise UsageError(f"{path} exists; results are append-only, choose a new --out directory") from None
    except OSError as exc:
        raise _write_failed(path, exc) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return path


def is_model(obj: object) -> TypeGuard[BaseModel]:
    """Whether `obj` is a pydantic model, asked without importing pydantic: an instance of one exists only once
    pydantic is imported, so a command that never builds one (`registry list`) starts without it."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(obj, pydantic.BaseModel)


def dump_json(obj: BaseModel | dict[str, Any] | list[Any]) -> bytes:
    if is_model(obj):
        return (obj.model_dump_json(indent=2) + "\n").encode()
    return (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode()


class JsonlWriter:
    """An append-only JSON-lines file, flushed per line so a crash keeps what was written. A write that fails
    (disk full) leaves the file ending at its last whole record: the part of a line or batch that did reach the
    disk is cut off again, and what was still buffered is dropped, never flushed later."""

    def __init__(self, path: Path) -> None:
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path} exists; results are append-only, choose a new --out directory")
        refuse_sealed(path.parent, "writing")
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: IO[str] | None = path.open("x", encoding="utf-8")
        except OSError as exc:
            raise _write_failed(path, exc) from None
        self.count = 0
        self.failed: ResultsWriteError | None = None
        self._whole = 0  # bytes on disk up to the end of the last record written whole

    def write(self, record: BaseModel | dict[str, Any]) -> None:
        if self.failed is not None:
            raise self.failed
        assert self._fh is not None, "writer closed"
        line = record.model_dump_json() if is_model(record) else json.dumps(record, default=str)
        self._append(scrubbed_text(line) + "\n")
        self.count += 1

    def write_many(self, records: Sequence[BaseModel | dict[str, Any]]) -> None:
        """Every record, then one flush and fsync: a load point's thousand requests cost one sync, not a thousand
        (a crash keeps every batch written before it)."""
        if self.failed is not None:
            raise self.failed
        assert self._fh is not None, "writer closed"
        lines = [(r.model_dump_json() if is_model(r) else json.dumps(r, default=str)) for r in records]
        if not lines:
            return
        self._append("".join(scrubbed_text(ln) + "\n" for ln in lines))
        self.count += len(lines)

    def _append(self, text: str) -> None:
        assert self._fh is not None, "writer closed"
        data = text.encode("utf-8")
        try:
            self._fh.write(text)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            self.failed = _write_failed(self.path, exc)
            self._cut_back()
            raise self.failed from None
        self._whole += len(data)

    def _cut_back(self) -> None:
        """After a failed write: the file back to its last whole record, the unwritten rest dropped."""
        fh, self._fh = self._fh, None
        if fh is None:
            return
        with contextlib.suppress(OSError, ValueError):
            os.ftruncate(fh.fileno(), self._whole)  # shrinking needs no free space
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fh.buffer.raw.close()  # type: ignore[attr-defined]  # the buffered rest can never be flushed later
        with contextlib.suppress(OSError, ValueError):
            fh.close()

    def close(self) -> None:
        """Close; a line that could not be flushed (disk full) is dropped, never raised a second time."""
        if self._fh is not None:
            fh, self._fh = self._fh, None
            with contextlib.suppress(OSError):
                fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ResultsDir:
    """One run's results directory. Files are created once; names are relative to `path`.

    A command makes its own with `create` (--out: new or empty, `check_new_out`) or `new` (under the results root);
    the constructor opens one that may exist already (a tune's folder on --resume, a measurer's in tests)."""

    def __init__(self, path: Path, *, min_free_bytes: int | None = None) -> None:
        """Open (creating) a results directory; refuse one inside a finished run, unwritable, or nearly full."""
        self.path = path
        refuse_sealed(path, "results directory")
        existed = path.is_dir()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create the results directory {path}: {_mkdir_problem(path, exc)}; choose "
                             "another --out (or SERVEPACK_RESULTS_DIR)") from None
        try:
            check_writable(path, MIN_FREE_BYTES if min_free_bytes is None else min_free_bytes)
        except UsageError:
            if not existed:
                with contextlib.suppress(OSError):
                    path.rmdir()  # made just now and empty: leave no trace of a run that never started
            raise

    @classmethod
    def create(cls, path: Path) -> ResultsDir:
        """A command's --out: made new, or an existing empty folder taken (`check_new_out`, checked again now)."""
        check_new_out(path)
        return cls(path)

    @classmethod
    def new(cls, root: Path, pack_id: str, label: str | None = None) -> ResultsDir:
        """results/<pack>/<UTC timestamp>[-label]/, made unique if two runs start in the same second."""
        stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
        base = root / pack_id / (f"{stamp}-{label}" if label else stamp)
        refuse_sealed(base.parent, "results root")
        candidate, n = base, 1
        while True:
            try:
                candidate.mkdir(parents=True, exist_ok=False)
            except FileExistsError:
                n += 1
                candidate = base.with_name(f"{base.name}.{n}")
                continue
            except OSError as exc:
                raise UsageError(f"cannot create a results directory under {root}: {_mkdir_problem(candidate, exc)}"
                                 "; set SERVEPACK_RESULTS_DIR to a writable directory") from None
            try:
                return cls(candidate)
            except UsageError:
                with contextlib.suppress(OSError):
                    candidate.rmdir()
                raise

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, obj: BaseModel | dict[str, Any] | list[Any]) -> Path:
        return write_bytes_atomic(self.file(name), dump_json(obj))

    def write_text(self, name: str, text: str) -> Path:
        return write_bytes_atomic(self.file(name), text.encode())

    def jsonl(self, name: str) -> JsonlWriter:
        return JsonlWriter(self.file(name))

    def free_bytes(self) -> int | None:
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def files(self) -> Iterator[Path]:
        """Every regular file under the directory, sorted, skipping in-flight temp files."""
        for p in sorted(self.path.rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                yield p


def _mkdir_problem(path: Path, exc: OSError) -> str:
    """What stands in the way of `mkdir -p path`, named: a file where a directory must be, or the OS reason."""
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            return f"{p} is a file, not a directory"
    return exc.strerror or type(exc).__name__


def check_out(path: Path, what: str = "the results directory") -> None:
    """Before anything is resolved or launched: --out can become a new directory (no file in the way, not inside
    a finished run). Nothing is created."""
    refuse_sealed(path, what)
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise UsageError(f"cannot create {what} {path}: {p} is {_not_a_folder(p)}, not a directory; choose "
                                 "another --out" + (" (or SERVEPACK_RESULTS_DIR)" if what == "the results directory"
                                                    else ""))
            return


def _not_a_folder(p: Path) -> str:
    """What stands where a folder must be, in words: a FIFO, a device or a socket named as what it is (issue 35: a
    FIFO was 'a file'), a broken link as one, anything else 'a file'."""
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return "a broken link"
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((what for test, what in kinds if test(mode)), "a file")


def check_new_out(path: Path) -> None:
    """The one rule for the results directory a command makes at --out (run, bench, smoke, capacity, tune, reproduce,
    serve, llama-bench): a path where nothing is yet, or an existing empty folder. Refused, each in one line naming
    the fix (UsageError, exit 2): a symbolic link (even to an empty folder: the run would land wherever it points),
    a file, a folder with anything in it (servepack would write beside its files, scrub the logs among them and hash
    them all into its receipt), a folder it cannot list, a place inside a finished run. Nothing is created or
    written; called before anything runs and again by `ResultsDir.create`, when the folder is made."""
    if path.is_symlink():
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        raise UsageError(f"--out {path}: a symbolic link{target}; servepack makes its results folder itself: give "
                         "a new folder's path, not a link")
    check_out(path)
    if not path.is_dir():
        return
    try:
        with os.scandir(path) as entries:
            names = sorted(e.name for e in entries)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot list the folder ({exc.strerror}); choose a new folder") from None
    if names:
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        raise UsageError(f"--out {path}: the folder exists and is not empty ({names[0]!r}{more}); servepack writes "
                         "its results only into a new or empty folder: choose a new folder or remove it")


def check_writable(path: Path, min_free_bytes: int) -> None:
    """Before a run starts: a probe file can be created, written and synced in `path`, and the filesystem has
    `min_free_bytes` free. UsageError (exit 2, nothing launched) otherwise."""
    try:
        fd, probe = _tempfile().mkstemp(prefix=".servepack-probe.", dir=path)
    except OSError as exc:
        raise UsageError(f"results directory {path} is not writable ({exc.strerror}); choose another --out or "
                         "fix its permissions") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"probe\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise UsageError(f"results directory {path} cannot be written ({exc.strerror}); free space or choose "
                         "another --out") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)
    try:
        st = os.statvfs(path)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if free < min_free_bytes:
        raise UsageError(f"results directory {path} has {free / MIB:.1f} MiB free; a run needs at least "
                         f"{min_free_bytes / MIB:.0f} MiB for its timelines, samples and receipt; free space or "
                         "choose another --out")
