"""Where the registry database file is, and whether it may be opened there: never through a link (the file or the
journal names SQLite opens beside it), never a file that is not regular, never in a folder others may swap it in; a
read command never makes one (`check_db_path`). The default place is under the cache dir (`default_db_path`).

A linked *folder* on the way (`--db ~/data/registry.sqlite3` where `~/data` links to a larger disk, or a cache dir
that is a link) is the user's own layout and is followed, as every tool follows it: the database is made and opened
where the link leads. What the no-link rule guards against is someone else choosing that place, so each link on the
way must be one only you (or root) could have made or changed: owned by you or root, in a folder others cannot
write (or one with the sticky bit, like /tmp); otherwise the path is refused, naming the link and where it leads.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from servepack.errors import UsageError
from servepack.safepath import create_new, kind_of
from servepack.settings import Settings

DB_FILE_NAME = "registry.sqlite3"

MAKE_ONE = "`servepack registry import PATH…` makes one (or give --db the path of one)"
SIDECARS = ("-journal", "-wal", "-shm")  # the files SQLite opens beside the database, by name


def lstat_or_none(path: Path) -> os.stat_result | None:
    """`os.lstat(path)`, None when nothing is there; UsageError when it cannot be looked at."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: cannot look at the registry database ({exc.strerror}); give --db PATH") from None


def check_db_path(path: Path, *, create: bool) -> bool:
    """Whether a database file is at `path`; UsageError (exit 2) when the registry must not be opened there.

    Refused: a symbolic link at `path` or at any of the names SQLite opens beside it (`-journal`, `-wal`, `-shm`,
    which it would write through), anything there that is not a regular file, a directory that others may write
    to without the sticky bit (they could swap the file between the check and the open), and, for a read
    (`create=False`), no file at all: a read command never makes the registry.
    """
    for name in (path, *(path.with_name(path.name + s) for s in SIDECARS)):
        st = lstat_or_none(name)
        if st is None:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{name}: a symbolic link; the registry database and its journal are never opened "
                             "through a link: remove the link, or give --db the real file's path")
        if not stat.S_ISREG(st.st_mode):  # named as what it is, as verify names a receipt that is none
            raise UsageError(f"{name}: not a regular file ({kind_of(st.st_mode)}); give --db the path of a registry "
                             "database file")
    folder = path.parent
    _check_links_on_the_way(folder)
    dst = lstat_or_none(folder)
    if dst is None:
        if not create:
            raise UsageError(f"{path}: no registry database here (no folder {folder}); {MAKE_ONE}")
    else:
        real = os.stat(folder)
        if not stat.S_ISDIR(real.st_mode):
            raise UsageError(f"{folder}: not a folder; give --db PATH inside a folder")
        if _others_may_write(real):
            raise UsageError(f"{folder}: writable by every user and not sticky, so another user could swap the "
                             "registry file; give --db PATH in a folder of your own")
    exists = lstat_or_none(path) is not None
    if not exists and not create:
        raise UsageError(f"{path}: no registry database here; {MAKE_ONE}")
    return exists


MAX_LINK_HOPS = 40  # as the kernel's own limit (ELOOP)


def _others_may_write(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX


def _check_links_on_the_way(folder: Path) -> None:
    """Refuse (UsageError) a linked folder on the way to `folder` that someone else could have made or re-pointed:
    a link owned by another user, or one in a folder others may write without the sticky bit. Followed component by
    component as the kernel does, so a link inside a link's target is judged too; a part not there yet ends the
    walk (the folders are made later)."""
    todo = list(folder.absolute().parts[1:])
    here, hops, me = Path("/"), 0, os.getuid()
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            here = here.parent
            continue
        step = here / name
        st = lstat_or_none(step)
        if st is None:
            return
        if not stat.S_ISLNK(st.st_mode):
            here = step
            continue
        hops += 1
        target = os.readlink(step)
        leads = Path(os.path.normpath(here / target))
        if hops > MAX_LINK_HOPS:
            raise UsageError(f"{folder}: too many links on the way (a loop?); give --db a path without them")
        if st.st_uid not in (me, 0):
            raise UsageError(f"{step}: a link to {leads} owned by another user (uid {st.st_uid}), on the way to the "
                             "registry database; they could point it elsewhere: give --db the real path")
        if _others_may_write(os.stat(here)):
            raise UsageError(f"{step}: a link to {leads} in {here}, a folder every user may write (not sticky), so "
                             "another user could re-point it; give --db the real path")
        todo = [*Path(target).parts[1:], *todo] if os.path.isabs(target) else [*Path(target).parts, *todo]
        if os.path.isabs(target):
            here = Path("/")


def create_db_file(path: Path) -> None:
    """Make the (empty) database file: never through a link, never over an existing file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{path.parent}: cannot create the registry directory ({exc.strerror}); "
                         "give --db PATH somewhere writable") from None
    try:
        os.close(create_new(path))
    except FileExistsError:
        check_db_path(path, create=True)  # made meanwhile (another import): the same checks again
    except OSError as exc:
        raise UsageError(f"{path}: cannot create the registry database ({exc.strerror}); give --db PATH "
                         "somewhere writable") from None


def same_file_still(path: Path, before: os.stat_result | None) -> None:
    """After SQLite opened `path`: the same regular file as checked before, not a link or file put there meanwhile."""
    st = lstat_or_none(path)
    if st is None or before is None or not stat.S_ISREG(st.st_mode) or \
            (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
        raise UsageError(f"{path}: replaced while it was being opened; give --db the path of a registry database "
                         "file that nothing else is changing")


def default_db_path(settings: Settings | None = None) -> Path:
    """<cache dir>/registry.sqlite3 (SERVEPACK_CACHE_DIR, else $XDG_CACHE_HOME/servepack or ~/.cache/servepack)."""
    return (settings or Settings.load()).cache_dir / DB_FILE_NAME
