"""The record `servepack engine build` writes beside the binaries it made (`servepack-build.json`), and reading it.

Its own module so that locating a binary (`locate.py`) can ask whether servepack built it without importing the
build, which itself reads `--version` through `locate.py`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from servepack.strict import Strict

BUILD_RECORD = "servepack-build.json"
BUILD_SCHEMA_VERSION = "servepack.engine-build/v1"


class BuiltBinary(Strict):
    path: str
    sha256: str


class BuildRecord(Strict):
    """What `servepack engine build` made: read back by engine show and receipts."""

    schema_version: str = BUILD_SCHEMA_VERSION
    servepack_version: str
    pack_id: str
    pack_sha256: str
    source: str
    source_is_git: bool
    source_commit: str | None
    pinned_commit: str | None
    commit_match: bool | None = Field(description="None where the tree is no git checkout or the pack pins none")
    pinned: bool = Field(description="every pinned fact holds: commit (when checkable) and --version")
    unpinned_reasons: list[str]
    allow_unpinned: bool
    cmake_flags: list[str]
    cuda_arch: str | None
    host_notes: list[str]
    targets: list[str]
    binaries: dict[str, BuiltBinary]
    patches: list[dict[str, str]]
    version_text: str
    expected_version: str | None
    version_match: bool | None
    started_at: str
    seconds: float
    log: str
    source_package: str | None = Field(None, description="name==version of the sdist built, from its PKG-INFO")
    rpc_protocol: str | None = Field(None, description="RPC protocol of ggml-rpc.h when rpc-server was built")
    jobs: int | None = Field(None, description="parallel compile jobs the build ran (None in older records)")


def read_build_record(binary: Path) -> BuildRecord | None:
    """The build record beside `binary` (written by `servepack engine build`), if any and readable."""
    path = binary.resolve().parent / BUILD_RECORD
    try:
        return BuildRecord.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
