"""One run's session: pack → model → engine → host → server, yielded to a measurer, then a receipt.

Everything a run needs is resolved here once; the server is torn down and the receipt written on every
exit path (success, error, Ctrl-C, SIGTERM), with whatever was measured kept on disk.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from servepack import __version__
from servepack.engine.build import read_build_record
from servepack.engine.locate import EngineFacts, locate_binary
from servepack.engine.server import LOOPBACK, Server, build_argv, free_port, launch
from servepack.errors import ClaimRefused, EngineError, ServepackError, UsageError
from servepack.host.fingerprint import HostFingerprint, detected_hardware_id, fingerprint, match_target
from servepack.host.memory import MemorySampler
from servepack.packs import LoadedPack, Pack, Preset, load_pack
from servepack.packs.schema import FileSource, HfSource
from servepack.records.receipt import (
    RECEIPT_NAME,
    ClaimRecord,
    EngineRecord,
    HardwareAttribution,
    ModelFacts,
    PackRef,
    PresetRef,
    Receipt,
    ServerRecord,
    engine_environment,
    hash_files,
)
from servepack.store import ResultsDir, rfc3339, utc_now
from servepack.settings import Settings
from servepack.weights.gguf import read_header
from servepack.weights.resolve import ResolvedModel, hf_expected_path, resolve_model
from servepack.weights.twin import is_twin

Progress = Callable[[str], None]
MEMORY_TIMELINE = "memory.jsonl"
MEMORY_SUMMARY = "memory_summary.json"


def _quiet(_: str) -> None:
    pass


def attribution(host: HostFingerprint, loaded: LoadedPack) -> HardwareAttribution:
    """Label numbers with the detected hardware; the pack's target id only when its rules match."""
    target = loaded.pack.hardware
    ok, failed = match_target(host, target)
    detected = detected_hardware_id(host)
    return HardwareAttribution(
        detected_id=detected,
        label=host.label(),
        target_id=target.id,
        target_match=ok,
        failed_rules=failed,
        attributed_id=target.id if ok and not target.generic else detected,
    )


@dataclass
class Session:
    """What a measurer gets: the pack, the running server, the results directory and the facts."""

    loaded: LoadedPack
    preset_name: str
    preset_obj: Preset
    results: ResultsDir
    model: ResolvedModel
    engine: EngineFacts
    host: HostFingerprint
    hardware: HardwareAttribution
    server: Server
    claim_requested: bool
    kind: str
    temperature: float | None = None
    claim_failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    props: dict[str, Any] | None = None
    sampler: MemorySampler | None = None

    @property
    def pack(self) -> Pack:
        return self.loaded.pack

    @property
    def random_weights(self) -> bool:
        return is_twin(self.model.path)

    def refuse_claim(self, reason: str) -> None:
        """Record a condition that makes this run ineligible for claims."""
        if reason not in self.claim_failures:
            self.claim_failures.append(reason)


def claim_preconditions(
    loaded: LoadedPack, hw: HardwareAttribution, engine: EngineFacts, model: ResolvedModel, base_url: str
) -> list[str]:
    """Every claim condition that is already known to fail before measuring."""
    failures = []
    if not hw.target_match:
        failures.append(
            f"hardware: detected {hw.detected_id} ({hw.label}), not {hw.target_id}: {'; '.join(hw.failed_rules)}"
        )
    if not engine.pin_match:
        failures.append(f"engine pin not matched: {engine.pin_reason}")
    build = read_build_record(engine.path)
    if build is not None and not build.pinned:
        failures.append(f"engine built unpinned: {'; '.join(build.unpinned_reasons) or 'see servepack-build.json'}")
    if model.pin_match is not True:
        failures.append("model pin not matched: " + ("no sha256 pinned" if model.pin_sha256 is None else
                                                     f"sha256 {model.sha256[:12]}… ≠ pin {model.pin_sha256[:12]}…"))
    if is_twin(model.path):
        failures.append("model is a random-weight shape twin: speed only")
    src = loaded.pack.model.source
    if src.kind == "hf" and not src.revision_is_commit:
        failures.append(f"weights revision {src.revision!r} is a branch, not a commit")
    if not base_url.startswith((f"http://{LOOPBACK}:", "http://localhost:", "http://[::1]:")):
        failures.append(f"base URL {base_url} is not on this machine")
    return failures


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so `finally` blocks tear the server down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _props(base_url: str) -> dict[str, Any] | None:
    try:
        r = httpx.get(f"{base_url}/props", timeout=10)
        if r.status_code == 200:
            body = r.json()
            keep = ("build_info", "model_path", "n_ctx", "total_slots", "chat_template_caps", "modalities")
            dgs = body.get("default_generation_settings", {})
            out = {k: body[k] for k in keep if k in body}
            out["n_ctx"] = out.get("n_ctx", dgs.get("n_ctx"))
            return out
    except (httpx.HTTPError, ValueError):
        pass
    return None


@contextlib.contextmanager
def open_session(
    pack_ref: str | None,
    preset: str | None = None,
    *,
    out: Path | None = None,
    kind: str = "run",
    server_bin: Path | None = None,
    model_path: Path | None = None,
    local_dir: Path | None = None,
    port: int | None = None,
    claim: bool = False,
    progress: Progress | None = None,
    settings: Settings | None = None,
) -> Iterator[Session]:
    """Resolve, launch, yield a Session, and always stop the server and write receipt.json."""
    say = progress or _quiet
    settings = settings or Settings.load()
    loaded = load_pack(pack_ref)
    pack = loaded.pack
    try:
        preset_name, preset_obj = pack.preset(preset)
    except KeyError as exc:
        raise UsageError(f"--preset: {exc.args[0]}") from None
    if claim and preset_obj.role != "claim":
        raise ClaimRefused(f"--claim: preset {preset_name!r} has role {preset_obj.role!r}; claims need a claim preset")
    started = utc_now()
    say(f"pack {pack.id} · preset {preset_name}")
    host = fingerprint()
    hw = attribution(host, loaded)
    if claim and not hw.target_match:
        # Before any weights are resolved or pulled: a claim for hardware that is not here is refused at once.
        raise ClaimRefused(f"claim refused: hardware: detected {hw.detected_id} ({hw.label}), not {hw.target_id}: "
                           f"{'; '.join(hw.failed_rules)}")
    model = resolve_model(
        pack.model, cache_dir=settings.cache_dir, pack_dir=loaded.path.parent, local_dir=local_dir,
        model_path=model_path,
        progress=_bytes_progress(say, "model"),
    )
    say(f"model {model.path.name} sha256 {model.sha256[:12]}… ({model.size_bytes:,} bytes)")
    engine = locate_binary("llama-server", pack.engine, server_bin or _env_path(settings.llama_server))
    say(f"engine {engine.path} ({engine.chosen_by}); pin match: {engine.pin_match} ({engine.pin_reason})")
    port = port or free_port()
    base_url = f"http://{LOOPBACK}:{port}"
    early = claim_preconditions(loaded, hw, engine, model, base_url)
    if claim and early:
        raise ClaimRefused(f"claim refused: {early[0]}" + (f" (and {len(early) - 1} more)" if len(early) > 1 else ""))
    results = ResultsDir(out) if out else ResultsDir.new(settings.results_dir, pack.id, kind)
    say(f"results → {results.path}")
    extra = _extra_files(loaded, preset_obj, local_dir)
    argv = build_argv(engine.path, model.path, preset_obj, host=LOOPBACK, port=port, extra_files=extra)
    alias = str(preset_obj.flags.get("alias", model.path.stem))
    session: Session | None = None
    # Sampled from before the launch, so the receipt has host memory before and after the model loads.
    sampler = MemorySampler(None, results.jsonl(MEMORY_TIMELINE), guards=pack.bench.guards).start()
    error: str | None = None
    status = "failed"
    server_rec: ServerRecord | None = None
    try:
        with _sigterm_unwinds(), launch(
            argv, host=LOOPBACK, port=port, model_alias=alias, log_path=results.file("server.log"),
            health_timeout_s=settings.health_timeout_s, progress=say,
        ) as server:
            say(f"healthy after {server.ready_s:.1f} s")
            sampler.set_pid(server.pid)
            sampler.mark("model_loaded")
            session = Session(
                loaded=loaded, preset_name=preset_name, preset_obj=preset_obj, results=results, model=model,
                engine=engine, host=host, hardware=hw, server=server, claim_requested=claim, kind=kind,
                claim_failures=list(early), props=_props(server.base_url), sampler=sampler,
            )
            try:
                yield session
                status = "complete"
            finally:
                server_rec = _server_record(server)
    except ServepackError as exc:
        error, status = str(exc), ("partial" if session else "failed")
        raise
    except (KeyboardInterrupt, SystemExit) as exc:
        error, status = f"interrupted ({type(exc).__name__})", ("partial" if session else "failed")
        raise
    except Exception as exc:
        error, status = f"{type(exc).__name__}: {exc}", ("partial" if session else "failed")
        raise
    finally:
        sampler.stop()
        if sampler.writer is not None:
            sampler.writer.close()
        results.write_json(MEMORY_SUMMARY, sampler.summary())
        receipt = _receipt(loaded, preset_name, preset_obj, model, engine, host, hw, results, session, kind,
                           started, status, error, server_rec or ServerRecord(argv=argv, base_url=base_url,
                                                                              pid=None, ready_s=None,
                                                                              exit_code=None, log=None), claim)
        results.write_json(RECEIPT_NAME, receipt)


def _env_path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _extra_files(loaded: LoadedPack, preset: Preset, local_dir: Path | None) -> dict[str, Path]:
    out = {}
    for extra in loaded.pack.model.extra:
        if extra.name in preset.requires:
            src = extra.source
            if isinstance(src, HfSource):
                path = hf_expected_path(src, local_dir)
            elif isinstance(src, FileSource):
                path = Path(src.path).expanduser()
                path = path if path.is_absolute() else loaded.path.parent / path
            else:
                raise EngineError(f"model.extra {extra.name}: only hf and file sources are supported for extras")
            if not path.is_file():
                raise EngineError(f"preset needs {extra.file} at {path}; run `servepack pull PACK --with-draft`")
            out[extra.name] = path
    return out


def _bytes_progress(say: Progress, what: str) -> Callable[[int, int], None]:
    last = [-1]

    def report(done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if pct // 25 != last[0]:
            last[0] = pct // 25
            say(f"{what}: {done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    return report


def _server_record(server: Server) -> ServerRecord:
    server.stop()
    return ServerRecord(argv=server.argv, base_url=server.base_url, pid=server.pid, ready_s=server.ready_s,
                        exit_code=server.process.returncode, log="server.log")


def _receipt(
    loaded: LoadedPack, preset_name: str, preset: Preset, model: ResolvedModel, engine: EngineFacts,
    host: HostFingerprint, hw: HardwareAttribution, results: ResultsDir, session: Session | None, kind: str,
    started: Any, status: str, error: str | None, server: ServerRecord, claim: bool,
) -> Receipt:
    failures = session.claim_failures if session else ["run did not start"]
    if status != "complete":
        failures = [*failures, f"run {status}"]
    temperature = session.temperature if session else None
    if temperature is not None and temperature != loaded.pack.claims.temperature:
        failures = [*failures, f"temperature {temperature} ≠ claims temperature {loaded.pack.claims.temperature}"]
    try:
        gguf = read_header(model.path).summary()
    except ServepackError as exc:
        gguf = {"error": str(exc)}
    files = [p for p in results.files() if p.name != RECEIPT_NAME]
    return Receipt(
        run_id=f"{results.path.name}-{uuid.uuid4().hex[:8]}",
        kind=kind,
        status=status,
        error=error,
        started_at=rfc3339(started),
        ended_at=rfc3339(utc_now()),
        servepack_version=__version__,
        pack=PackRef(id=loaded.pack.id, path=str(loaded.path), sha256=loaded.sha256, shipped=loaded.shipped),
        preset=PresetRef(name=preset_name, role=preset.role, flags=dict(preset.flags)),
        model=ModelFacts(path=str(model.path), sha256=model.sha256, size_bytes=model.size_bytes,
                         pin_sha256=model.pin_sha256, pin_match=model.pin_match, source_kind=model.source_kind,
                         random_weights=is_twin(model.path), gguf=gguf),
        engine=EngineRecord(**engine.as_dict(), props=session.props if session else None,
                            unpinned_build=(build := read_build_record(engine.path)) is not None and not build.pinned),
        host=host,
        hardware=hw,
        server=server,
        temperature=temperature,
        environment=engine_environment(),
        claim=ClaimRecord(requested=claim, eligible=not failures, reasons=list(failures)),
        files=hash_files(results.path, files),
        notes=session.notes if session else [],
    )
