"""`servepack doctor --server-bin PATH` finds llama-bench beside that llama-server (a llama.cpp build's bin folder)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.doctor import diagnose
from servepack.engine.locate import beside


def _bin_dir(tmp_path: Path, fake_server_bin: Path, *, bench: bool) -> Path:
    build = tmp_path / "llama.cpp" / "build" / "bin"
    build.mkdir(parents=True)
    shutil.copy2(fake_server_bin, build / "llama-server")
    if bench:
        shutil.copy2(fake_server_bin, build / "llama-bench")
    return build


@pytest.fixture
def no_llama_bench_elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("SERVEPACK_LLAMA_BENCH", raising=False)
    monkeypatch.delenv("SERVEPACK_LLAMA_SERVER", raising=False)


def test_llama_bench_beside_the_given_server_is_found(tmp_path: Path, tiny_pack: Path, fake_server_bin: Path,
                                                      no_llama_bench_elsewhere: None) -> None:
    build = _bin_dir(tmp_path, fake_server_bin, bench=True)
    checks = {c.name: c for c in diagnose(str(tiny_pack), server_bin=build / "llama-server").checks}
    assert checks["llama-bench"].ok, checks["llama-bench"].detail
    assert checks["llama-bench"].detail.startswith(f"{(build / 'llama-bench').resolve()} (beside --server-bin)")
    res = CliRunner().invoke(cli, ["doctor", str(tiny_pack), "--server-bin", str(build / "llama-server")])
    assert "llama-bench" in res.output and "missing" not in res.output.lower()


def test_a_symlinked_server_finds_llama_bench_beside_its_target(tmp_path: Path, fake_server_bin: Path) -> None:
    build = _bin_dir(tmp_path, fake_server_bin, bench=True)
    links = tmp_path / "links"
    links.mkdir()
    (links / "llama-server").symlink_to(build / "llama-server")
    assert beside("llama-bench", links / "llama-server") == build / "llama-bench"


def test_without_one_beside_it_the_check_fails_and_says_where_it_looked(
        tmp_path: Path, tiny_pack: Path, fake_server_bin: Path, no_llama_bench_elsewhere: None) -> None:
    build = _bin_dir(tmp_path, fake_server_bin, bench=False)
    checks = {c.name: c for c in diagnose(str(tiny_pack), server_bin=build / "llama-server").checks}
    assert checks["llama-server"].ok
    assert not checks["llama-bench"].ok  # never the server binary standing in for llama-bench
    assert checks["llama-bench"].detail.endswith(f"(none beside --server-bin in {build})")
    assert beside("llama-bench", None) is None
