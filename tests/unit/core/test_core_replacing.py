"""safepath.Replacing, the one atomic replace (issue 22/25 leftovers): a temp file beside the target, renamed over
it when whole; on any failure (disk full, the sync, the rename, an error in the writer) the temp file is removed
and the old file is left as it was."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from disk_full import fill_disk
from servepack.safepath import Replacing, replace_bytes


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_a_whole_write_replaces_the_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    target.write_bytes(b"old")
    old_ino = target.stat().st_ino
    rep = Replacing(target, mode=0o600, sync=True)
    with rep as fh:
        fh.write(b"new ")
        fh.write(b"page")
    assert target.read_bytes() == b"new page" and _names(tmp_path) == ["page.html"]
    assert target.stat().st_ino != old_ino  # a new file renamed over, not the old one rewritten in place
    assert rep.stat is not None and (rep.stat.st_ino, rep.stat.st_size) == (target.stat().st_ino, 8)
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert replace_bytes(tmp_path / "new.md", b"x") == tmp_path / "new.md"
    assert oct((tmp_path / "new.md").stat().st_mode & 0o777) == "0o644"  # the default, less the umask (022 here)


@pytest.mark.parametrize("room", [0, 5, 1 << 16])
def test_a_full_disk_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     room: int) -> None:
    target = tmp_path / "MEASURED.md"
    target.write_bytes(b"the earlier page\n")
    refused = fill_disk(monkeypatch, room)
    with pytest.raises(OSError) as caught:
        replace_bytes(target, b"x" * (1 << 17))
    assert caught.value.errno == errno.ENOSPC  # the disk's own error, unchanged
    assert refused and all(Path(p).name.startswith(".MEASURED.md.") for p in refused)  # it hit the temp file
    assert target.read_bytes() == b"the earlier page\n" and _names(tmp_path) == ["MEASURED.md"]


def test_a_full_disk_with_no_earlier_file_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fill_disk(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        replace_bytes(tmp_path / "report.html", b"<html>")
    assert _names(tmp_path) == []


def test_a_failed_sync_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "model.gguf"
    target.write_bytes(b"old")

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output"):
        replace_bytes(target, b"new", sync=True)
    assert target.read_bytes() == b"old" and _names(tmp_path) == ["model.gguf"]
    monkeypatch.undo()
    replace_bytes(target, b"new", sync=False)  # without sync it is never called
    assert target.read_bytes() == b"new"


def test_a_failed_rename_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.html"
    target.write_bytes(b"old")

    def refuse(src: object, dst: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "replace", refuse)
    rep = Replacing(target)
    with pytest.raises(OSError, match="Read-only"):
        with rep as fh:
            fh.write(b"new")
    assert target.read_bytes() == b"old" and _names(tmp_path) == ["report.html"] and rep.stat is None


def test_an_error_in_the_writer_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.write_bytes(b"old")
    for exc in (ValueError("bad bytes"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with Replacing(target) as fh:
                fh.write(b"half of it")
                raise exc
        assert target.read_bytes() == b"old" and _names(tmp_path) == ["a.json"]


def test_a_link_at_the_target_is_replaced_never_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"host file")
    d = tmp_path / "d"
    d.mkdir()
    (d / "page.html").symlink_to(outside)
    replace_bytes(d / "page.html", b"page")
    assert outside.read_bytes() == b"host file"
    assert not (d / "page.html").is_symlink() and (d / "page.html").read_bytes() == b"page"


def test_a_missing_folder_is_the_os_error_and_nothing_is_made(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        replace_bytes(tmp_path / "no" / "x.md", b"x")
    assert _names(tmp_path) == []
