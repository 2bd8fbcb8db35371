"""receipt.json: the provenance of one run, hash-linked to every file it covers."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servepack.host.fingerprint import HostFingerprint

RECEIPT_SCHEMA_VERSION: Literal["servepack.receipt/v1"] = "servepack.receipt/v1"
RECEIPT_NAME = "receipt.json"
# Environment variables that change what the engine does; recorded with secrets redacted.
ENGINE_ENV = re.compile(r"^(LLAMA_|GGML_|CUDA_|HIP_|OMP_|OPENBLAS_|MKL_|HF_|HUGGING|SERVEPACK_|KMP_)")
SECRET = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD|AUTH)", re.IGNORECASE)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PackRef(Strict):
    id: str
    path: str
    sha256: str
    shipped: bool


class PresetRef(Strict):
    name: str
    role: str
    flags: dict[str, str | int | float | bool]


class ModelFacts(Strict):
    path: str
    sha256: str
    size_bytes: int
    pin_sha256: str | None
    pin_match: bool | None
    source_kind: str
    random_weights: bool = Field(description="a shape twin: speed only, never smoke or quality")
    gguf: dict[str, Any]


class EngineRecord(Strict):
    name: str
    path: str
    chosen_by: str
    sha256: str
    version_text: str
    package: str | None
    package_version: str | None
    commit: str | None
    pin_match: bool
    pin_reason: str
    unpinned_build: bool = False
    props: dict[str, Any] | None = Field(None, description="GET /props build facts; None if unavailable")


class HardwareAttribution(Strict):
    detected_id: str
    label: str
    target_id: str
    target_match: bool
    failed_rules: list[str]
    attributed_id: str = Field(description="the id this run's numbers carry: target only when matched")


class ServerRecord(Strict):
    argv: list[str]
    fidelity: Literal["faithful"] = "faithful"
    base_url: str
    pid: int | None
    ready_s: float | None
    exit_code: int | None
    log: str | None


class ClaimRecord(Strict):
    requested: bool
    eligible: bool
    reasons: list[str] = Field(description="each condition that is not met; empty when eligible")


class Receipt(Strict):
    schema_version: Literal["servepack.receipt/v1"] = RECEIPT_SCHEMA_VERSION
    run_id: str
    kind: str = Field(description="run, bench, smoke, serve, llama-bench, ...")
    status: Literal["complete", "partial", "failed"]
    error: str | None
    started_at: str
    ended_at: str
    servepack_version: str
    pack: PackRef
    preset: PresetRef | None
    model: ModelFacts | None
    engine: EngineRecord | None
    host: HostFingerprint
    hardware: HardwareAttribution
    server: ServerRecord | None
    temperature: float | None
    environment: dict[str, str]
    claim: ClaimRecord
    files: dict[str, str] = Field(description="relative path → sha256 of every results file covered")
    notes: list[str] = Field(default_factory=list)


def engine_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ) if env is None else env
    return {k: ("<redacted>" if SECRET.search(k) else v) for k, v in sorted(env.items()) if ENGINE_ENV.match(k)}


def hash_files(root: Path, paths: list[Path]) -> dict[str, str]:
    out = {}
    for p in paths:
        h = hashlib.sha256()
        with p.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        out[p.relative_to(root).as_posix()] = h.hexdigest()
    return out
