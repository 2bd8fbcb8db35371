"""`servepack report --out FILE.html` replaces only a page servepack wrote: a user's own file of that name is kept
(it was replaced, nothing said), a FIFO or a device is refused as what it is, a folder that cannot be written is
refused before anything is read (it was OSError, exit 70), and a disk that fills while the page is written is one
line, exit 1, with no temp file left. The tmpfs cases run in a private mount namespace (`unshare -rm`; skipped where
user namespaces are unavailable). Scratch directories only, never the host disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "records"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from records_synth import make_run

from system_deps import require


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"), "run")


def _report(run: Path, out: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["report", str(run), "--out", str(out)])
    return result.exit_code, result.stderr


def test_a_users_own_file_is_kept_and_an_earlier_page_replaced(run: Path, tmp_path: Path) -> None:
    mine = tmp_path / "notes.html"
    mine.write_text("<html><body>my notes</body></html>\n")
    code, err = _report(run, mine)
    assert code == 2 and err.splitlines() == [
        f"servepack: error: --out {mine}: exists and is not a page servepack wrote, so it is kept; remove it or "
        "choose another --out"]
    assert mine.read_text() == "<html><body>my notes</body></html>\n"
    page = tmp_path / "page.html"
    assert _report(run, page)[0] == 0
    first = page.stat().st_ino
    assert _report(run, page)[0] == 0 and page.stat().st_ino != first  # an earlier page: replaced whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.html", "page.html"]


def test_a_fifo_named_like_a_page_is_refused_as_what_it_is(run: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    code, err = _report(run, fifo)
    assert code == 2 and err.splitlines() == [
        f"servepack: error: --out {fifo}: not a regular file (a FIFO (named pipe)); give a new or an earlier "
        "report's file path"]
    assert fifo.is_fifo()


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.parametrize(("options", "code", "line"), [
    ("size=1m,ro", 2, "servepack: error: --out {out}: folder {mnt} is not writable here (permission denied or a "
                      "read-only filesystem); choose another --out or fix its permissions"),
    ("size=8k", 1, "servepack: error: cannot write {out} (the disk is full); nothing else was changed"),
], ids=["read-only", "full"])
def test_a_folder_that_cannot_take_the_page(run: Path, tmp_path: Path, options: str, code: int, line: str) -> None:
    require("unshare")
    if not _unshare_works():
        pytest.skip("needs `unshare -rm` and tmpfs mounts (user namespaces: the kernel's, not a package)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    out = mnt / "page.html"
    env = {**os.environ, "SERVEPACK_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o {options} tmpfs "$0" && shift && '
                           '"$@"; echo "rc=$?"; ls -A "$0"', str(mnt), "--", sys.executable, "-m",
                           "servepack.cli.main", "report", str(run), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.stderr.splitlines() == [line.format(out=out, mnt=mnt)], done.stderr
    assert done.stdout.splitlines() == [f"rc={code}"]  # and nothing left in the folder: no page, no temp file
