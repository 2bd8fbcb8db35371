"""Names a file may give for other files, and write targets that must stay inside their directory.

A pack, record or case names files; those names are plain (`model.gguf`) or relative paths made of plain
parts (`subdir/model.gguf`). Before anything is opened for writing, its target is resolved (links followed)
and checked to lie inside the directory it belongs to.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from servepack.errors import UsageError

MAX_NAME_BYTES = 255


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


def create_new(path: Path) -> int:
    """A descriptor open for writing on a new file at `path`: never an existing file, never through a link."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
