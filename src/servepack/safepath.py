"""Names a file may give for other files, write targets that must stay inside their directory, and the one
bounded reader of files a user names.

A pack, record or case names files; those names are plain (`model.gguf`) or relative paths made of plain
parts (`subdir/model.gguf`). Before anything is opened for writing, its target is resolved (links followed)
and checked to lie inside the directory it belongs to.

Every file a user names for reading (a pack, a record, a space, a case, a response, a results directory's
files) is read by `read_bounded`: opened non-blocking (a FIFO cannot stall the open), checked to be a regular
file on the descriptor itself (no FIFO, device, socket or folder), and read up to a cap (a larger file is
refused naming the cap, so /dev/zero or a huge file never ends in MemoryError).

Every file servepack replaces as a whole (a page, MEASURED.md, a model, a cache entry, a build record, a process
stamp) is written by `Replacing`: a new temp file beside it, renamed over it when whole, so a reader sees the old
file or the new one, never half; on any failure (disk full, read-only, an error in the writer) the temp file is
removed and the old file is left as it was. (Append-only results files are `store`'s: it never replaces.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import BinaryIO

from servepack.errors import ServepackError, UsageError

MAX_NAME_BYTES = 255
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def name_problem(name: str) -> str | None:
    """Why `name` is not a plain file name (no separator, no `..`, no NUL or control character), or None."""
    if not name:
        return "is empty"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return "holds a NUL or control character"
    if "/" in name or "\\" in name:
        return "holds a path separator"
    if name in (".", ".."):
        return f"is {name!r}, a directory reference"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    return None


def relative_path_problem(path: str) -> str | None:
    """Why `path` is not a relative POSIX path of plain parts (`a/b.gguf`), or None."""
    if not path:
        return "is empty"
    if path.startswith("/") or "\\" in path:
        return "is absolute or uses backslashes"
    for part in path.split("/"):
        problem = name_problem(part)
        if problem:
            return f"has a part that {problem}" if part else "has an empty part (`//` or a trailing `/`)"
    return None


def check_name(name: str) -> str:
    """`name` if plain; ValueError (for pydantic validators) naming the problem."""
    problem = name_problem(name)
    if problem:
        raise ValueError(f"file name {name!r} {problem}; give a plain file name such as model.gguf")
    return name


def check_relative_path(path: str) -> str:
    """`path` if it is a relative path of plain parts; ValueError naming the problem."""
    problem = relative_path_problem(path)
    if problem:
        raise ValueError(f"path {path!r} {problem}; give a relative path of plain names such as dir/model.gguf")
    return path


def is_inside(directory: Path, target: Path) -> bool:
    """Whether `target`, with every link resolved, lies inside `directory` (also resolved)."""
    root = Path(os.path.realpath(directory))
    real = Path(os.path.realpath(target))
    return real == root or root in real.parents


def inside(directory: Path, target: Path, what: str = "file") -> Path:
    """`target` when it (links resolved) lies inside `directory`; UsageError otherwise, before anything is opened."""
    if "\0" in str(target):
        raise UsageError(f"{what} path {str(target)!r} holds a NUL byte; give a plain file name")
    if not is_inside(directory, target):
        raise UsageError(
            f"refusing to write {what} {target}: it resolves to {os.path.realpath(target)}, outside {directory}; "
            "file names must be plain names (no `..`, no absolute path, no link out of the directory)"
        )
    return target


def join_inside(directory: Path, relative: str, what: str = "file", *, root: Path | None = None) -> Path:
    """`directory / relative` for a relative path of plain parts that, links resolved, stays inside `root`
    (default: `directory`; the Hub cache's snapshot links point into the repository's `blobs/`)."""
    problem = relative_path_problem(relative)
    if problem:
        raise UsageError(f"{what} {relative!r} {problem}; give a relative path of plain names")
    return inside(directory if root is None else root, directory / PurePosixPath(relative), what)


def create_new(path: Path, mode: int = 0o644) -> int:
    """A descriptor open for writing on a new file at `path`: never an existing file, never through a link."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


class Replacing:
    """`with Replacing(path) as fh: fh.write(...)`: `path` replaced by what the block wrote, atomically.

    The temp file (`.<name>.<random>.partial` beside `path`, so the rename stays on one file system) is created
    new, never through a link, with `mode` (less the umask). When the block ends well it is flushed, with `sync`
    fsynced, and renamed over `path`; `stat` is then the new file's, read on its descriptor after the rename.
    When anything fails (the block raises, a write, the flush, the sync or the rename), the temp file is removed,
    the error goes on unchanged, and `path` is as it was.
    """

    def __init__(self, path: Path, *, mode: int = 0o644, sync: bool = False) -> None:
        self.path, self.mode, self.sync = path, mode, sync
        self.stat: os.stat_result | None = None
        self._tmp: Path | None = None
        self._file: BinaryIO | None = None

    def __enter__(self) -> BinaryIO:
        for _ in range(100):
            tmp = self.path.with_name(f".{self.path.name}.{os.urandom(4).hex()}.partial")
            try:
                fd = create_new(tmp, self.mode)
            except FileExistsError:
                continue
            break
        else:
            raise FileExistsError(errno.EEXIST, "no free temp file name", str(self.path.parent))
        self._tmp = tmp
        try:
            self._file = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            self._discard()
            raise
        return self._file

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        fh, tmp = self._file, self._tmp
        assert fh is not None and tmp is not None, "Replacing used outside its with block"
        try:
            if kind is None:
                fh.flush()
                if self.sync:
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
                self._tmp = None  # it is the file at `path` now
                self.stat = os.fstat(fh.fileno())
        finally:
            with contextlib.suppress(OSError):
                fh.close()  # on a failure its buffer may not fit either; the first error is the one raised
            self._discard()

    def _discard(self) -> None:
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._tmp = None


def replace_bytes(path: Path, data: bytes, *, mode: int = 0o644, sync: bool = False) -> Path:
    """`path` replaced by `data` atomically (`Replacing`): on any failure the old file stays and no temp file."""
    with Replacing(path, mode=mode, sync=sync) as fh:
        fh.write(data)
    return path


def kind_of(mode: int) -> str:
    """What a file of this `st_mode` is, in words ("a FIFO (named pipe)", "a character device", "a folder", ...;
    "a regular file" for one): how a refusal names a path that is not the regular file it wanted."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((what for test, what in _KINDS if test(mode)), "a special file")


def kind_at(path: Path) -> str | None:
    """What is at `path` (`kind_of`, a link followed), or None where nothing is (or it cannot be looked at)."""
    try:
        return kind_of(os.stat(path).st_mode)
    except (OSError, ValueError):
        return None


def size_text(n: int) -> str:
    """A byte count as the largest whole unit (16 MiB, 64 KiB, 300 bytes)."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def names_something(path: Path) -> bool:
    """Whether `path` names something on disk (a link counts, even one that leads nowhere): how a reference that
    is a file or else a name (a pack id, a registry id, a case id) is told apart. A name no filesystem takes (too
    long, a NUL byte) names nothing, where `Path.exists` raises; a path that cannot be looked at (permission) counts
    as something, so its reader says why it cannot be read."""
    try:
        os.lstat(path)
    except ValueError:
        return False
    except OSError as exc:
        return exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG)
    return True


def open_regular(path: Path, hint: str, *, label: str | None = None, follow: bool = True,
                 error: type[ServepackError] = UsageError) -> BinaryIO:
    """`path` open for reading when it is a regular file; `error` (exit 2) naming the file otherwise.

    The open never blocks (O_NONBLOCK: a FIFO with no writer would wait forever) and the type is checked on the
    open descriptor, so nothing swapped in after a check is read. `follow=False` refuses a link at `path`.
    For files of any size (a model); `read_bounded` adds a cap for files read whole.
    """
    name = label or str(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except ValueError:
        raise error(f"{name!r}: holds a NUL byte; {hint}") from None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise error(f"{name}: no such file; {hint}") from None
        if exc.errno == errno.ELOOP and not follow:
            raise error(f"{name}: a symbolic link, not followed here; give the file it points to ({hint})") from None
        raise error(f"{name}: cannot read ({exc.strerror}); {hint}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{name}: not a regular file ({kind_of(mode)}); {hint}")
    fh = os.fdopen(fd, "rb")
    fh.raw.name = str(path)  # type: ignore[attr-defined]  # as open(path) names it, not the descriptor number
    return fh


def read_bounded(path: Path, cap: int, hint: str, *, label: str | None = None, follow: bool = True,
                 error: type[ServepackError] = UsageError) -> bytes:
    """The bytes of the regular file at `path`, at most `cap` of them; `error` (exit 2) naming the file otherwise.

    `label` names the file in messages (default: the path; e.g. `--space PATH`); `hint` is the fix, appended to
    every message. `follow=False` refuses a symbolic link at `path` itself (O_NOFOLLOW). The open never blocks
    (O_NONBLOCK), the type is checked on the open descriptor, and one byte past the cap is read to see a file that
    grew after fstat.
    """
    name = label or str(path)
    with open_regular(path, hint, label=label, follow=follow, error=error) as fh:
        too_big = f"{name}: larger than {size_text(cap)}; {hint}"
        if os.fstat(fh.fileno()).st_size > cap:
            raise error(too_big)
        try:
            raw = fh.read(cap + 1)
        except OSError as exc:
            raise error(f"{name}: cannot read ({exc.strerror}); {hint}") from None
    if len(raw) > cap:
        raise error(too_big)
    return raw
