"""receipt.json: the provenance of one run, hash-linked to every file it covers."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from servepack import __version__
from servepack.engine.buildrecord import BuildRecord
from servepack.engine.locate import EngineFacts
from servepack.errors import ServepackError
from servepack.host.fingerprint import HostFingerprint
from servepack.packs import LoadedPack
from servepack.packs.schema import Preset
from servepack.redact import env_holds_secret, redact_argv, redact_flags, scrub_text, secret_values
from servepack.store import REDACTED, dump_json, rfc3339, utc_now, write_bytes_atomic
from servepack.strict import Strict
from servepack.weights.resolve import ResolvedModel

RECEIPT_SCHEMA_VERSION: Literal["servepack.receipt/v1"] = "servepack.receipt/v1"
RECEIPT_NAME = "receipt.json"
# Where a run's receipt goes when its own results directory cannot be written (disk full, read-only).
FALLBACK_DIR = "unwritten-receipts"
# Environment variables that change what the engine does; recorded with secrets redacted (`redact.env_holds_secret`:
# a switch such as HF_HUB_DISABLE_IMPLICIT_TOKEN=1 is kept).
ENGINE_ENV = re.compile(r"^(LLAMA_|GGML_|CUDA_|HIP_|OMP_|OPENBLAS_|MKL_|HF_|HUGGING|SERVEPACK_|KMP_)")


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


class EngineRecord(EngineFacts):
    """The engine as the run found it (`EngineFacts`), plus what only a run knows."""

    unpinned_build: bool = False
    props: dict[str, Any] | None = Field(None, description="GET /props build facts; None if unavailable")


class TopologyHost(Strict):
    """One host of an RPC split, as identified (or not) for the hardware attribution."""

    role: str
    endpoint: str | None
    detected_id: str | None = Field(description="None: the host served no fingerprint, so it is not identified")
    label: str | None


class HardwareAttribution(Strict):
    detected_id: str
    label: str
    target_id: str
    target_match: bool
    failed_rules: list[str]
    attributed_id: str = Field(description="the id this run's numbers carry: target only when matched")
    topology: list[TopologyHost] = Field(
        default_factory=list, description="an RPC split: every host it ran on, head first; empty on one host")


class ProcessRecord(Strict):
    """One process the endpoint stood on: an engine may run several, on several hosts."""

    role: str = Field(description="server, attached, rpc-worker, ...")
    host: str
    argv: list[str]
    binary_sha256: str | None
    pid: int | None
    exit_code: int | None
    log: str | None
    fingerprint: HostFingerprint | None = Field(None, description="the host it ran on (an RPC worker serves its own)")
    endpoint: str | None = Field(None, description="host:port it served on (an RPC worker)")
    rpc_protocol: str | None = Field(None, description="llama.cpp RPC protocol version, where known")


class ServerRecord(Strict):
    argv: list[str] = Field(description="the head process's argv, token by token as executed")
    fidelity: Literal["faithful"] = "faithful"
    base_url: str
    pid: int | None
    ready_s: float | None
    exit_code: int | None
    log: str | None
    processes: list[ProcessRecord] = Field(default_factory=list, description="every process behind the endpoint")
    launch_kind: str = Field("native", description="how the engine was started: native (a process here), docker")
    allowed_flag_families: list[str] = Field(
        default_factory=list, description="flag families the run was allowed with --allow-server-flag (tools, ...)")


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
    environment: dict[str, str] = Field(description="engine-related variables the server was started with")
    environment_dropped: list[str] = Field(
        default_factory=list, description="names of servepack's variables the server did not get (allow-list)")
    claim: ClaimRecord
    files: dict[str, str] = Field(description="relative path → sha256 of every results file covered")
    notes: list[str] = Field(default_factory=list)


def engine_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ) if env is None else env
    return {k: (REDACTED if env_holds_secret(k, v) else v) for k, v in sorted(env.items()) if ENGINE_ENV.match(k)}


def hash_files(root: Path, paths: list[Path]) -> dict[str, str]:
    out = {}
    for p in paths:
        h = hashlib.sha256()
        with p.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        out[p.relative_to(root).as_posix()] = h.hexdigest()
    return out


@dataclass(frozen=True)
class RunFacts:
    """What the session knows of one run when it writes the receipt; `build_receipt` turns it into a Receipt."""

    loaded: LoadedPack
    preset_name: str
    preset: Preset
    kind: str
    started_at: datetime
    status: Literal["complete", "partial", "failed"]
    error: str | None
    model: ResolvedModel | None
    engine: EngineFacts | None
    props: dict[str, Any] | None
    host: HostFingerprint
    hardware: HardwareAttribution
    server: ServerRecord
    temperature: float | None
    claim_requested: bool
    claim_reasons: list[str]
    notes: list[str]
    environment: Mapping[str, str] | None = None  # the server's; None: servepack's own (nothing was started)
    environment_dropped: tuple[str, ...] = ()
    # read from disk once, before the launch (`plan.RunPlan`): the model's twin mark and GGUF header (its summary, or
    # why it could not be read), the engine's build record
    random_weights: bool = False
    gguf: dict[str, Any] | None = None
    gguf_error: str | None = None
    build: BuildRecord | None = None


def model_facts(model: ResolvedModel, run: RunFacts) -> ModelFacts:
    gguf = run.gguf if run.gguf is not None else {"error": run.gguf_error or "GGUF header not read"}
    return ModelFacts(path=str(model.path), sha256=model.sha256, size_bytes=model.size_bytes,
                      pin_sha256=model.pin_sha256, pin_match=model.pin_match, source_kind=model.source_kind,
                      random_weights=run.random_weights, gguf=gguf)


def engine_record(engine: EngineFacts, props: dict[str, Any] | None, build: BuildRecord | None) -> EngineRecord:
    return EngineRecord(**engine.model_dump(), props=props, unpinned_build=build is not None and not build.pinned)


def redact_server(server: ServerRecord) -> ServerRecord:
    """The server record with the value of every secret-bearing flag replaced, in every process's argv."""
    return server.model_copy(update={
        "argv": redact_argv(server.argv),
        "processes": [p.model_copy(update={"argv": redact_argv(p.argv)}) for p in server.processes],
    })


def run_secrets(run: RunFacts) -> list[str]:
    """Every secret value the run's argv and preset carry (keys in an --api-key-file included)."""
    argvs = [run.server.argv, *(p.argv for p in run.server.processes)]
    flags = [f"--{k}={v}" for k, v in run.preset.flags.items() if not isinstance(v, bool)]
    return sorted({v for a in [*argvs, ["servepack", *flags]] for v in secret_values(a)}, key=lambda v: (-len(v), v))


def build_receipt(run: RunFacts, results_path: Path, files: list[Path]) -> Receipt:
    """The receipt of one run, hash-linked to `files` (every results file but the receipt itself).

    Secrets are redacted here, the one place a run's argv and flags are written: preset flags, every argv, and
    the secret values themselves wherever they appear in the error or the notes.
    """
    secrets = run_secrets(run)
    return Receipt(
        run_id=f"{results_path.name}-{uuid.uuid4().hex[:8]}",
        kind=run.kind,
        status=run.status,
        error=scrub_text(run.error, secrets) if run.error is not None else None,
        started_at=rfc3339(run.started_at),
        ended_at=rfc3339(utc_now()),
        servepack_version=__version__,
        pack=PackRef(id=run.loaded.pack.id, path=str(run.loaded.path), sha256=run.loaded.sha256,
                     shipped=run.loaded.shipped),
        preset=PresetRef(name=run.preset_name, role=run.preset.role, flags=redact_flags(run.preset.flags)),
        model=model_facts(run.model, run) if run.model is not None else None,
        engine=engine_record(run.engine, run.props, run.build) if run.engine is not None else None,
        host=run.host,
        hardware=run.hardware,
        server=redact_server(run.server),
        temperature=run.temperature,
        environment=engine_environment(dict(run.environment) if run.environment is not None else None),
        environment_dropped=list(run.environment_dropped),
        claim=ClaimRecord(requested=run.claim_requested, eligible=not run.claim_reasons,
                          reasons=list(run.claim_reasons)),
        files=hash_files(results_path, files),
        notes=[scrub_text(n, secrets) for n in run.notes],
    )


def _fallback_key(run_dir: Path) -> str:
    return hashlib.sha256(os.path.realpath(run_dir).encode("utf-8", "surrogateescape")).hexdigest()[:24]


def fallback_dirs(cache_dir: Path) -> list[Path]:
    """Directories for receipts that could not be written into their run: the cache, then a private temp dir."""
    return [cache_dir / FALLBACK_DIR, Path(tempfile.gettempdir()) / f"servepack-{os.getuid()}" / FALLBACK_DIR]


def _private_dir(d: Path) -> bool:
    """`d` exists (made if need be), is a real directory owned by this user, and not writable by others."""
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = d.lstat()
    except OSError:
        return False
    return not d.is_symlink() and st.st_uid == os.getuid() and not st.st_mode & 0o022


def write_fallback_receipt(receipt: Receipt, run_dir: Path, cache_dir: Path) -> Path | None:
    """Write the receipt of a run whose own directory is unwritable where `verify RUN_DIR` will look for it."""
    name = f"{_fallback_key(run_dir)}-{receipt.run_id[-8:]}.json"
    for d in fallback_dirs(cache_dir):
        if not _private_dir(d):
            continue
        with contextlib.suppress(ServepackError, OSError):
            return write_bytes_atomic(d / name, dump_json(receipt))
    return None


def find_fallback_receipt(run_dir: Path, cache_dir: Path) -> Path | None:
    """The newest receipt written for `run_dir` outside it (see `write_fallback_receipt`), if any."""
    key = _fallback_key(run_dir)
    found = [p for d in fallback_dirs(cache_dir) if d.is_dir() and not d.is_symlink()
             for p in d.glob(f"{key}-*.json") if p.is_file() and not p.is_symlink()]
    return max(found, key=lambda p: p.stat().st_mtime_ns, default=None)
