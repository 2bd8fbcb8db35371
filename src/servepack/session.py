"""One run's lifecycle: resolve → launch → sample memory → yield → tear down → write the receipt.

Everything a run needs is resolved here once. The engine (picked by the pack's `engine.name`) launches the
endpoint; the session yields it to the caller, which runs measurers and records what they report with
`Session.record`. The endpoint is torn down and the receipt written on every exit path (success, error, Ctrl-C,
SIGTERM, SIGHUP), with whatever was measured kept on disk. Claim policy lives in `records.policy`, receipt
assembly in `records.receipt`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Literal

from servepack.engine.base import Endpoint, LaunchRequest
from servepack.engine.catalog import get_engine
from servepack.engine.environ import engine_env_kind, server_env
from servepack.engine.locate import EngineFacts
from servepack.engine.server import LOOPBACK, SERVERS_INDEX, STAMP_SUFFIX, free_port, preset_args, reap_stale
from servepack.errors import ClaimRefused, ResultsWriteError, ServepackError, UsageError
from servepack.host.fingerprint import HostFingerprint, fingerprint
from servepack.host.memory import MemorySampler
from servepack.packs import LoadedPack, Pack, Preset, load_pack
from servepack.packs.flag_policy import allowed_now, check_flags, preset_tokens, topology_flags
from servepack.packs.schema import ENGINE_LOADED_KINDS
from servepack.progress import Progress
from servepack.records.policy import (
    attribution,
    claim_preconditions,
    final_claim_reasons,
    hardware_failure,
    topology_attribution,
)
from servepack.records.receipt import (
    RECEIPT_NAME,
    HardwareAttribution,
    ProcessRecord,
    Receipt,
    RunFacts,
    ServerRecord,
    build_receipt,
    run_secrets,
    write_fallback_receipt,
)
from servepack.redact import scrub_file, scrub_text, secret_values
from servepack.settings import Settings
from servepack.store import ResultsDir, check_new_out, register_secrets, utc_now
from servepack.weights.extras import extra_files
from servepack.weights.resolve import ModelRef, ResolvedModel, resolve_model, resolve_model_ref
from servepack.weights.twin import is_twin

MEMORY_TIMELINE = "memory.jsonl"
MEMORY_SUMMARY = "memory_summary.json"
Status = Literal["complete", "partial", "failed"]


def _quiet(_: str) -> None:
    pass


@dataclass
class Ledger:
    """What the caller recorded during the run from the measurers' results: it goes into the receipt."""

    temperature: float | None = None
    claim_failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Session:
    """What a caller gets: the pack, the running endpoint, the results directory and the facts."""

    loaded: LoadedPack
    preset_name: str
    preset_obj: Preset
    results: ResultsDir
    model: ResolvedModel | None
    engine: EngineFacts | None
    host: HostFingerprint
    hardware: HardwareAttribution
    endpoint: Endpoint
    claim_requested: bool
    kind: str
    sampler: MemorySampler
    ledger: Ledger = field(default_factory=Ledger)

    @property
    def pack(self) -> Pack:
        return self.loaded.pack

    @property
    def random_weights(self) -> bool:
        return self.model is not None and is_twin(self.model.path)

    def record(self, *, blockers: Iterable[str] = (), notes: Iterable[str] = (),
               temperature: float | None = None) -> None:
        """Record what a measurer returned: conditions that block a claim, notes, the temperature it used."""
        for reason in blockers:
            if reason not in self.ledger.claim_failures:
                self.ledger.claim_failures.append(reason)
        self.ledger.notes.extend(notes)
        if temperature is not None:
            self.ledger.temperature = temperature


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP (a closed terminal or ssh session) into SystemExit so `finally` tears down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


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
    preset_override: Preset | None = None,
    allow_flags: Collection[str] | None = None,
) -> Iterator[Session]:
    """Resolve, launch, yield a Session, and always tear down and write receipt.json.

    `preset_override` serves the given flags instead of a pack preset (a tuning trial), recorded under the name
    `preset` (or "override"). A flag that reaches this host (`packs.flag_policy`) is refused before anything is
    resolved or started unless its family is in `allow_flags` (default: the command's `--allow-server-flag`).
    """
    say = progress or _quiet
    settings = settings or Settings.load()
    loaded = load_pack(pack_ref)
    pack = loaded.pack
    if out is not None:
        check_new_out(out)  # before anything is resolved or launched
    if preset_override is not None:
        preset_name, preset_obj = preset or "override", preset_override
    else:
        try:
            preset_name, preset_obj = pack.preset(preset)
        except KeyError as exc:
            raise UsageError(f"--preset: {exc.args[0]}") from None
    allowed = allowed_now() if allow_flags is None else frozenset(allow_flags)
    check_flags(pack.engine.name, preset_tokens(preset_obj.flags), allowed, f"preset {preset_name!r} of {loaded.path}")
    for where, flag in topology_flags(pack.topology_for(preset_name) if preset_override is None else None):
        check_flags("rpc-server", [flag], allowed, f"{loaded.path}: {where}")
    register_secrets(secret_values(["servepack", *preset_args(preset_obj.flags)]))  # no file written keeps them
    if claim and preset_obj.role != "claim":
        raise ClaimRefused(f"--claim: preset {preset_name!r} has role {preset_obj.role!r}; claims need a claim preset")
    engine = get_engine(pack.engine.name, settings)
    # the server's environment, as the engine builds it: the values it keeps, the names it drops (for the receipt)
    launch_env = server_env(engine_env_kind(pack.engine.name)) if engine.launches else None
    started = utc_now()
    say(f"pack {pack.id} · preset {preset_name}")
    host = fingerprint()
    hw = attribution(host, loaded)
    if claim and (hw_fail := hardware_failure(hw)):
        # Before any weights are resolved or pulled: a claim for hardware that is not here is refused at once.
        raise ClaimRefused(f"claim refused: {hw_fail}")
    model: ResolvedModel | None = None
    model_ref: ModelRef | None = None
    if engine.launches and pack.model.source.kind in ENGINE_LOADED_KINDS:
        # the engine loads a repository or a directory itself: named here, never hashed
        model_ref = resolve_model_ref(pack.model, pack_dir=loaded.path.parent, model_path=model_path)
        say(f"model {model_ref.ref}" + (f" @ {model_ref.revision}" if model_ref.revision else "")
            + " (loaded by the engine itself; servepack hashes no weights of it)")
    elif engine.launches:
        model = resolve_model(
            pack.model, cache_dir=settings.cache_dir, pack_dir=loaded.path.parent, local_dir=local_dir,
            model_path=model_path, progress=_bytes_progress(say, "model"),
            force_hash=claim or settings.verify_model,
        )
        say(f"model {model.path.name} sha256 {model.sha256[:12]}… ({model.size_bytes:,} bytes)")
    topology = pack.topology_for(preset_name) if preset_override is None else None
    if topology is not None:
        # the engine picks the head binary and binds the workers' ports, so the argv recorded is final
        split = engine.split(loaded, topology, server_bin)
        server_bin, topology = split.head, split.topology
    facts = engine.locate(pack.engine, server_bin)
    if facts is not None:
        say(f"engine {facts.path} ({facts.chosen_by}); pin match: {facts.pin_match} ({facts.pin_reason})")
    port = port or free_port()
    base_url = f"http://{LOOPBACK}:{port}" if engine.launches else (pack.engine.base_url or "")
    early = claim_preconditions(loaded, hw, facts, model, base_url)
    if claim and early:
        raise ClaimRefused(f"claim refused: {early[0]}" + (f" (and {len(early) - 1} more)" if len(early) > 1 else ""))
    for line in reap_stale(stale_stamps(settings, out)):
        say(line)
    results = ResultsDir.create(out) if out else ResultsDir.new(settings.results_dir, pack.id, kind)
    say(f"results → {results.path}")
    if topology is not None:
        say(f"RPC split over {len(topology.workers)} worker(s): {', '.join(w.address for w in topology.workers)}")
    request = LaunchRequest(
        facts=facts, pin=pack.engine, model_path=model.path if model else None, preset=preset_obj, host=LOOPBACK,
        port=port, log_dir=results.path, health_timeout_s=settings.health_timeout_s,
        extra_files=extra_files(loaded, preset_obj, local_dir) if engine.launches else {}, progress=say,
        model_ref=model_ref,
        topology=topology,
        allowed_flags=allowed,
    )
    argv = engine.argv(request)
    session: Session | None = None
    endpoint: Endpoint | None = None
    sampler = MemorySampler(None, results.jsonl(MEMORY_TIMELINE), guards=pack.bench.guards)
    error: str | None = None
    status: Status = "failed"
    try:
        # Sampled from before the launch, so the receipt has host memory before and after the model loads; started
        # inside the try, so the finally stops and joins its thread whatever happens from here (Ctrl-C included).
        sampler.start()
        with _signals_unwind(), engine.launch(request) as endpoint:
            if endpoint.ready_s is not None:
                say(f"healthy after {endpoint.ready_s:.1f} s")
            sampler.set_pid(endpoint.pid)
            sampler.mark("model_loaded")
            hw, topo_blockers = topology_attribution(hw, endpoint.processes)
            if claim and topo_blockers:
                raise ClaimRefused(f"claim refused: {topo_blockers[0]}")
            session = Session(
                loaded=loaded, preset_name=preset_name, preset_obj=preset_obj, results=results, model=model,
                engine=facts, host=host, hardware=hw, endpoint=endpoint, claim_requested=claim, kind=kind,
                sampler=sampler, ledger=Ledger(claim_failures=[*early, *topo_blockers]),
            )
            yield session
            status = "complete"
    except ResultsWriteError as exc:
        error, status = str(exc), "failed"
        raise
    except ServepackError as exc:
        # An engine's error may quote its log, which may echo its argv: the message shown holds no secret either.
        exc.args = (scrub_text(str(exc), secret_values(["engine", *argv, *preset_args(preset_obj.flags)])),)
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
        try:
            results.write_json(MEMORY_SUMMARY, sampler.summary())
        except ResultsWriteError as exc:
            # Disk full or made read-only: the receipt still gets written, here or elsewhere, and says why.
            error = str(exc) if error is None else f"{error}; {MEMORY_SUMMARY} not written either ({exc.reason})"
            status = "failed"
        ledger = session.ledger if session else Ledger()
        run = RunFacts(
            loaded=loaded, preset_name=preset_name, preset=preset_obj, kind=kind, started_at=started, status=status,
            error=error, model=model, engine=facts, props=endpoint.props if endpoint else None, host=host,
            hardware=hw, server=_server_record(endpoint, argv, base_url, allowed), temperature=ledger.temperature,
            claim_requested=claim, notes=ledger.notes,
            environment=launch_env.env if launch_env else None,
            environment_dropped=launch_env.dropped if launch_env else (),
            claim_reasons=final_claim_reasons(ledger.claim_failures, started=session is not None, status=status,
                                              temperature=ledger.temperature,
                                              claims_temperature=pack.claims.temperature),
        )
        secrets = run_secrets(run)
        for log in results.files():
            if log.suffix == ".log":  # the engine's own output may echo its argv
                scrub_file(log, secrets)
        files = [p for p in results.files() if p.name != RECEIPT_NAME]
        _write_receipt(build_receipt(run, results.path, files), results, settings, say)


def stale_stamps(settings: Settings, out: Path | None) -> list[Path]:
    """Stamps of servers earlier servepack runs started: the cache's index, the results root's runs, --out's dir."""
    pattern = f".*{STAMP_SUFFIX}"
    found = list((settings.cache_dir / SERVERS_INDEX).glob(f"*{STAMP_SUFFIX}"))
    found += settings.results_dir.glob(f"*/*/{pattern}")
    if out is not None:
        found += out.glob(pattern)
    return found


def _write_receipt(receipt: Receipt, results: ResultsDir, settings: Settings, say: Progress) -> None:
    """receipt.json in the run; when the run's directory cannot take it, a copy where `verify RUN` finds it."""
    try:
        results.write_json(RECEIPT_NAME, receipt)
        return
    except ResultsWriteError as exc:
        failure = exc
    if receipt.status != "failed":
        receipt = receipt.model_copy(update={"status": "failed", "error": "; ".join(
            e for e in (receipt.error, f"{RECEIPT_NAME} not written ({failure.reason})") if e)})
    where = write_fallback_receipt(receipt, results.path, settings.cache_dir)
    if where is None:
        say(f"the receipt could not be written anywhere ({failure.reason}); {results.path} keeps what was measured "
            "but cannot be verified")
    else:
        say(f"{results.path} cannot take its receipt ({failure.reason}); it was written to {where}, where "
            f"`servepack verify {results.path}` reads it")


def _bytes_progress(say: Progress, what: str) -> Callable[[int, int], None]:
    last = [-1]

    def report(done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if pct // 25 != last[0]:
            last[0] = pct // 25
            say(f"{what}: {done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    return report


def _server_record(endpoint: Endpoint | None, argv: list[str], base_url: str,
                   allowed: Collection[str] = ()) -> ServerRecord:
    """The head process as launched (or as it would have been), and every process behind the endpoint."""
    opt_ins = sorted(allowed)
    if endpoint is None:
        return ServerRecord(argv=argv, base_url=base_url, pid=None, ready_s=None, exit_code=None, log=None,
                            allowed_flag_families=opt_ins)
    head = endpoint.processes[0] if endpoint.processes else None
    return ServerRecord(
        argv=head.argv if head else argv, base_url=endpoint.base_url, pid=head.pid if head else None,
        ready_s=endpoint.ready_s, exit_code=head.exit_code if head else None, log=head.log if head else None,
        launch_kind=endpoint.launch_kind, allowed_flag_families=opt_ins,
        processes=[ProcessRecord(role=p.role, host=p.host, argv=p.argv, binary_sha256=p.binary_sha256, pid=p.pid,
                                 exit_code=p.exit_code, log=p.log, fingerprint=p.fingerprint, endpoint=p.endpoint,
                                 rpc_protocol=p.rpc_protocol) for p in endpoint.processes],
    )
