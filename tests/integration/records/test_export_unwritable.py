"""`registry export --out DIR` where DIR cannot be written (a read-only filesystem here: a tmpfs mounted read-only in
a private mount namespace, `unshare -rm`; skipped where user namespaces are unavailable) is refused before anything
is read, in one line naming the flag and the fix, exit 2. It was the failed write of the first record, worded as a
measurement stopped ("measuring stopped, what was already written is kept"), exit 1. Never the host disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from system_deps import require


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m,ro tmpfs /mnt"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _in_read_only_tmpfs(mnt: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVEPACK_CACHE_DIR": str(cwd / "cache"), "SERVEPACK_RESULTS_DIR": str(cwd / "results")}
    return subprocess.run(["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=1m,ro tmpfs "$0" && shift && '
                           'exec "$@"', str(mnt), "--", sys.executable, "-m", "servepack.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


@pytest.mark.parametrize("where", ["out", "out/deeper"])
def test_an_export_folder_that_cannot_be_written_is_refused_first(tmp_path: Path, where: str) -> None:
    require("unshare")
    if not _unshare_works():
        pytest.skip("needs `unshare -rm` and tmpfs mounts (user namespaces: the kernel's, not a package)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    run = tmp_path / "run"  # never read: the refusal comes before the run is loaded
    run.mkdir()
    out = mnt / where
    done = _in_read_only_tmpfs(mnt, "registry", "export", str(run), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"servepack: error: --out {out}: {mnt} is not writable here (permission denied or a read-only filesystem); "
        "choose another --out or fix its permissions"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnt", "run"]  # no cache, no results
