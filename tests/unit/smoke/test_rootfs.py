"""RootFS: host-side reads and writes of a sandbox's directory never follow a link out of it."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pytest

from servepack.smoke.sandbox.rootfs import OutsideRoot, RootFS, StreamError, parse_stream


@pytest.fixture
def tree(tmp_path: Path) -> tuple[RootFS, Path]:
    """A root with files, an in-root link, and links out of it to a host secret."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    root = tmp_path / "root"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "v2.txt").write_text("version two\n")
    (root / "latest").symlink_to("notes/v2.txt")
    (root / "up").symlink_to("notes/../notes")
    (root / "abs").symlink_to(secret)
    (root / "climb").symlink_to("../secret.txt")
    (root / "env").symlink_to("/proc/self/environ")
    (root / "hostdir").symlink_to(tmp_path)
    (root / "loop").symlink_to("loop")
    return RootFS(root), secret


def test_in_root_links_are_followed(tree: tuple[RootFS, Path]) -> None:
    fs, _ = tree
    assert fs.read_bytes("latest", 100) == b"version two\n"
    assert fs.read_bytes("up/v2.txt", 100) == b"version two\n"
    assert fs.read_bytes("./notes/../notes/v2.txt", 5) == b"versi"


@pytest.mark.parametrize(
    "path", ["abs", "climb", "env", "hostdir/secret.txt", "../secret.txt", "notes/../../secret.txt", "/etc/passwd",
             "~/x", "hostdir"],
)  # fmt: skip
def test_links_and_paths_out_of_the_root_are_refused(tree: tuple[RootFS, Path], path: str) -> None:
    fs, secret = tree
    with pytest.raises(OutsideRoot):
        fs.read_bytes(path, 100)
    with pytest.raises(OutsideRoot):
        fs.write_bytes(path, b"overwritten")
    assert secret.read_text() == "TOPSECRET"


def test_a_link_loop_is_an_error_not_a_hang(tree: tuple[RootFS, Path]) -> None:
    fs, _ = tree
    with pytest.raises(OSError, match="too many levels"):
        fs.read_bytes("loop", 10)


def test_walk_lists_links_by_target_and_never_enters_them(tree: tuple[RootFS, Path]) -> None:
    fs, secret = tree
    listed = {rel: target for rel, _, target in fs.walk()}
    assert listed == {
        "abs": str(secret), "climb": "../secret.txt", "env": "/proc/self/environ", "hostdir": str(secret.parent),
        "latest": "notes/v2.txt", "loop": "loop", "notes": None, "notes/v2.txt": None, "up": "notes/../notes",
    }  # fmt: skip
    assert fs.file_bytes() == len("version two\n")


def test_a_fifo_is_refused_without_blocking(tree: tuple[RootFS, Path]) -> None:
    fs, _ = tree
    os.mkfifo(fs.root / "pipe")
    done: list[str] = []

    def read() -> None:
        try:
            fs.read_bytes("pipe", 10)
        except OSError as exc:
            done.append(str(exc))

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert done and "not a regular file" in done[0]


def test_write_creates_parents_and_replaces(tmp_path: Path) -> None:
    fs = RootFS(tmp_path)
    assert fs.write_bytes("a/b/c.txt", b"one") == "a/b/c.txt"
    assert fs.write_bytes("a/b/c.txt", b"2") == "a/b/c.txt"
    assert (tmp_path / "a" / "b" / "c.txt").read_bytes() == b"2"


def test_export_and_replace_round_trip(tree: tuple[RootFS, Path], tmp_path: Path) -> None:
    fs, secret = tree
    stream = io.BytesIO()
    fs.export(stream)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "stale.txt").write_text("old")
    assert RootFS(copy).replace_with(stream.getvalue()) == 9
    assert sorted(os.listdir(copy)) == sorted(os.listdir(fs.root))
    assert (copy / "notes" / "v2.txt").read_text() == "version two\n"
    assert os.readlink(copy / "abs") == str(secret)  # links stay links: a reader must still refuse them
    assert secret.read_text() == "TOPSECRET"


@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (b'{"t": "f", "p": "../x", "n": 1}\nx{"t": "end"}\n', "bad entry path"),
        (b'{"t": "f", "p": "/etc/x", "n": 1}\nx{"t": "end"}\n', "bad entry path"),
        (b'{"t": "d", "p": "a//b"}\n{"t": "end"}\n', "bad entry path"),
        (b'{"t": "f", "p": "x", "n": 10}\nxy', "truncated file"),
        (b'{"t": "f", "p": "x", "n": 1}\nx', "truncated entry stream"),
        (b'{"t": "c", "p": "dev"}\n{"t": "end"}\n', "bad entry header"),
        (b"not json\n", "not JSON"),
        (b'{"t": "l", "p": "x", "l": 5}\n{"t": "end"}\n', "bad link target"),
    ],
)
def test_a_malformed_stream_changes_nothing(tmp_path: Path, stream: bytes, why: str) -> None:
    (tmp_path / "keep.txt").write_text("kept")
    with pytest.raises(StreamError, match=why):
        RootFS(tmp_path).replace_with(stream)
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_a_good_stream_in_other_words_is_applied(tmp_path: Path) -> None:
    stream = b'{"t": "d", "p": "d", "m": 493}\n{"t": "f", "p": "d/x y", "m": 420, "n": 3}\nabc{"t": "end"}\n'
    assert [h["p"] for h, _ in parse_stream(stream)] == ["d", "d/x y"]
    assert RootFS(tmp_path).replace_with(stream) == 2
    assert (tmp_path / "d" / "x y").read_text() == "abc"
