"""Host-side access to a directory that sandboxed code has written: nothing here follows a link out of it.

Every path is walked component by component from a descriptor of the root, each directory opened with
O_NOFOLLOW. A link is followed only when its target is relative and stays inside the root (at most 40 hops);
an absolute target, or one that climbs above the root, raises `OutsideRoot`. Files are opened with
O_NOFOLLOW | O_NONBLOCK and must be regular files, so a FIFO or device cannot stall or feed the host.

The same module reads and writes the entry stream the sandbox supervisor speaks (servepack/smoke/
sandbox/boot.py): one JSON header line per entry (`t`: d, f or l; `p`: the relative path; `m`: mode;
`n`: byte count of a file, whose bytes follow; `l`: a link's target), ending with `{"t": "end"}`.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

MAX_LINK_HOPS = 40
MAX_DEPTH = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _check_regular(fd: int, rel: str) -> None:
    """The open descriptor is a regular file: IsADirectoryError for a folder, EINVAL for a FIFO, device, socket."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "not a regular file", rel)


class OutsideRoot(Exception):
    """A path, or a link on it, leads out of the root."""


class StreamError(Exception):
    """An entry stream that is malformed or larger than allowed."""


def _parts(rel: str) -> list[str]:
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") or "\0" in p for p in parts) or len(parts) > MAX_DEPTH:
        raise StreamError(f"bad entry path {rel!r}")
    return parts


class RootFS:
    """File operations confined to `root` (a directory the caller created)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))

    @contextmanager
    def _dir(self, parts: list[str]) -> Iterator[int]:
        """A descriptor of root/parts, reached without following any link."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def locate(self, rel: str, *, follow_last: bool = True, create_dirs: bool = False) -> tuple[list[str], str | None]:
        """(parent components, final name) of `rel` with in-root links resolved; name None for the root itself.

        The final name may not exist yet. Raises OutsideRoot, FileNotFoundError or NotADirectoryError.
        """
        text = rel.strip()
        if text.startswith(("/", "~")):
            raise OutsideRoot(rel)
        todo = text.split("/")
        resolved: list[str] = []
        hops = 0
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    raise OutsideRoot(rel)
                resolved.pop()
                continue
            last = all(p in ("", ".") for p in todo)
            with self._dir(resolved) as fd:
                try:
                    st = os.lstat(part, dir_fd=fd)
                except FileNotFoundError:
                    if last:
                        return resolved, part
                    if not create_dirs:
                        raise FileNotFoundError(errno.ENOENT, "no such file or directory", rel) from None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    resolved.append(part)
                    continue
                if stat.S_ISLNK(st.st_mode) and (follow_last or not last):
                    hops += 1
                    if hops > MAX_LINK_HOPS:
                        raise OSError(errno.ELOOP, "too many levels of symbolic links", rel)
                    target = os.readlink(part, dir_fd=fd)
                    if target.startswith("/"):
                        raise OutsideRoot(rel)
                    todo = target.split("/") + todo
                    continue
            if not last and not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", rel)
            resolved.append(part)
        return (resolved[:-1], resolved[-1]) if resolved else ([], None)

    def lstat(self, rel: str, *, follow_last: bool = True) -> os.stat_result | None:
        """The entry's own status (a link out of the root is reported, never followed), or None if missing."""
        try:
            parent, name = self.locate(rel, follow_last=follow_last)
        except FileNotFoundError:
            return None
        with self._dir(parent) as fd:
            try:
                return os.lstat(name, dir_fd=fd) if name is not None else os.fstat(fd)
            except FileNotFoundError:
                return None

    def read_bytes(self, rel: str, limit: int) -> bytes:
        """At most `limit` bytes of the regular file at `rel`."""
        parent, name = self.locate(rel)
        if name is None:
            raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
        with self._dir(parent) as dfd:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        with open(fd, "rb") as f:
            _check_regular(fd, rel)
            return f.read(limit)

    def write_bytes(self, rel: str, data: bytes) -> str:
        """Create or replace the regular file at `rel` (parents created); its root-relative path."""
        parent, name = self.locate(rel, create_dirs=True)
        if name is None:
            raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with self._dir(parent) as dfd:
            fd = os.open(name, flags, 0o644, dir_fd=dfd)
        with open(fd, "wb") as f:
            _check_regular(fd, rel)
            f.truncate(0)
            f.write(data)
        return "/".join([*parent, name])

    def walk(self, rel: str = ".") -> Iterator[tuple[str, os.stat_result, str | None]]:
        """(root-relative path, lstat, link target or None) of everything under `rel`, parents first, sorted."""
        parent, name = self.locate(rel)
        start = [*parent, name] if name is not None else []
        stack = [start]
        while stack:
            parts = stack.pop()
            try:
                with self._dir(parts) as fd:
                    listing = sorted(os.listdir(fd))
                    found = []
                    for entry in listing:
                        st = os.lstat(entry, dir_fd=fd)
                        target = os.readlink(entry, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else None
                        found.append((entry, st, target))
            except (NotADirectoryError, FileNotFoundError):
                continue
            for entry, st, target in found:
                yield "/".join([*parts, entry]), st, target
            deeper = len(parts) < MAX_DEPTH
            stack.extend([*parts, e] for e, st, _ in reversed(found) if stat.S_ISDIR(st.st_mode) and deeper)

    def file_bytes(self) -> int:
        """Bytes of all regular files (what the sandbox's quota must hold)."""
        return sum(st.st_size for _, st, _ in self.walk() if stat.S_ISREG(st.st_mode))

    def export(self, out: BinaryIO) -> None:
        """Write the whole tree as an entry stream; links as links, other special files left out."""
        for rel, st, target in self.walk():
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                _header(out, {"t": "d", "p": rel, "m": mode})
            elif target is not None:
                _header(out, {"t": "l", "p": rel, "l": target})
            elif stat.S_ISREG(st.st_mode):
                data = self.read_entry(rel)
                _header(out, {"t": "f", "p": rel, "m": mode, "n": len(data)})
                out.write(data)
        _header(out, {"t": "end"})

    def read_entry(self, rel: str, limit: int = -1) -> bytes:
        """The bytes of the regular file at `rel`, a path as `walk` gives it (no link on it is followed)."""
        parts = rel.split("/")
        with self._dir(parts[:-1]) as dfd:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", rel)
            return f.read(limit)

    def replace_with(self, data: bytes, offset: int = 0) -> int:
        """Make the tree exactly the entry stream in data[offset:]; the number of entries written.

        The stream is parsed completely before anything is removed, so a malformed one changes nothing.
        """
        entries = list(parse_stream(data, offset))
        with self._dir([]) as fd:
            for name in os.listdir(fd):
                _remove(fd, name)
        for head, body in entries:
            parts = _parts(str(head["p"]))
            mode = int(head.get("m", 0o644)) & 0o755
            with self._dir(parts[:-1]) as dfd:
                if head["t"] == "d":
                    os.mkdir(parts[-1], mode | 0o700, dir_fd=dfd)
                elif head["t"] == "l":
                    os.symlink(str(head["l"]), parts[-1], dir_fd=dfd)
                else:
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                    fd = os.open(parts[-1], flags, mode | 0o600, dir_fd=dfd)
                    with open(fd, "wb") as f:
                        f.write(body)
        return len(entries)


def _remove(dir_fd: int, name: str) -> None:
    """Remove an entry and, for a directory, all it holds; links are removed, never followed."""
    if stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode):
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            for child in os.listdir(fd):
                _remove(fd, child)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _header(out: BinaryIO, head: dict[str, Any]) -> None:
    out.write(json.dumps(head).encode() + b"\n")


def parse_stream(data: bytes, offset: int = 0) -> Iterator[tuple[dict[str, Any], bytes]]:
    """(header, file bytes) of each entry of a stream; StreamError if it is malformed or unterminated."""
    pos = offset
    while True:
        end = data.find(b"\n", pos, pos + (1 << 16))
        if end < 0:
            raise StreamError("truncated entry stream")
        try:
            head = json.loads(data[pos:end])
        except ValueError:
            raise StreamError("entry header is not JSON") from None
        pos = end + 1
        if not isinstance(head, dict) or head.get("t") not in ("d", "f", "l", "end"):
            raise StreamError(f"bad entry header {str(head)[:80]}")
        if head["t"] == "end":
            return
        _parts(str(head.get("p", "")))
        body = b""
        if head["t"] == "f":
            size = head.get("n")
            if not isinstance(size, int) or size < 0 or pos + size > len(data):
                raise StreamError("truncated file in entry stream")
            body, pos = data[pos : pos + size], pos + size
        elif head["t"] == "l" and (not isinstance(head.get("l"), str) or "\0" in head["l"]):
            raise StreamError("bad link target in entry stream")
        yield head, body
