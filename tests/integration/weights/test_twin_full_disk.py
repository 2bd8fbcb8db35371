"""A twin aimed at a disk that is too small, for real: a 256 KiB tmpfs in a user+mount namespace.

Skipped where unprivileged user namespaces are not allowed. Nothing is mounted outside the namespace.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gguf_writer_path import write_gguf

from system_deps import require


def _can_mount_tmpfs() -> bool:
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k none /mnt"],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


@pytest.fixture(autouse=True, scope="module")
def _tmpfs_in_a_user_namespace() -> None:
    require("unshare")  # util-linux: fails under make test when missing
    if not _can_mount_tmpfs():
        pytest.skip("needs unprivileged user + mount namespaces (the kernel's, not a package)")


def _twin_on_small_tmpfs(tmp_path: Path, tensor_elems: int) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "src.gguf"
    write_gguf(src, {"general.architecture": "llama"}, [("w", (tensor_elems,), 0)])
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=256k none {disk} && "
              f"{sys.executable} -m servepack.cli.main twin {src} {disk}/t.gguf; rc=$?; ls -A {disk}; exit $rc")
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_twin_larger_than_the_disk_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _twin_on_small_tmpfs(tmp_path, 1 << 20)  # 4 MiB of F32 on a 256 KiB disk
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("servepack: error: only "), done.stderr
    assert "free some space or choose an output path on another disk" in lines[0]
    assert done.stdout.strip() == ""  # nothing left on the small disk


def test_a_twin_that_fits_is_written_there(tmp_path: Path) -> None:
    done = _twin_on_small_tmpfs(tmp_path, 1 << 14)  # 64 KiB
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["t.gguf", "t.gguf.twin.json"]
