"""One run's lifecycle from its plan: launch → sample memory → yield → tear down → write the receipt.

Everything a run needs is resolved before it, once, by `plan.plan_run`. The engine the plan picked launches the
endpoint; the session yields it to the caller, which runs measurers and records what they report with
`Session.record`. The endpoint is torn down and the receipt written on every exit path (success, error, Ctrl-C,
SIGTERM, SIGHUP), with whatever was measured kept on disk. Claim policy lives in `records.policy`, receipt
assembly in `records.receipt`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Literal

from servepack.engine.base import Endpoint
from servepack.engine.locate import EngineFacts
from servepack.engine.server import SERVERS_INDEX, STAMP_SUFFIX, preset_args, reap_stale
from servepack.errors import ClaimRefused, ResultsWriteError, ServepackError
from servepack.host.fingerprint import HostFingerprint
from servepack.host.memory import MemorySampler
from servepack.packs import LoadedPack, Pack, Preset
from servepack.plan import RunPlan
from servepack.progress import Progress
from servepack.records.policy import final_claim_reasons, topology_attribution
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
from servepack.store import ResultsDir
from servepack.weights.resolve import ResolvedModel

MEMORY_TIMELINE = "memory.jsonl"
MEMORY_SUMMARY = "memory_summary.json"
Status = Literal["complete", "partial", "failed"]


@dataclass
class Ledger:
    """What the caller recorded during the run from the measurers' results: it goes into the receipt."""

    temperature: float | None = None
    claim_failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Session:
    """What a caller gets: the plan it was opened from, the running endpoint, the results directory."""

    plan: RunPlan
    results: ResultsDir
    hardware: HardwareAttribution  # the plan's, with every host of an RPC split named
    endpoint: Endpoint
    sampler: MemorySampler
    ledger: Ledger = field(default_factory=Ledger)

    @property
    def loaded(self) -> LoadedPack:
        return self.plan.loaded

    @property
    def pack(self) -> Pack:
        return self.plan.pack

    @property
    def preset_name(self) -> str:
        return self.plan.preset_name

    @property
    def preset_obj(self) -> Preset:
        return self.plan.preset

    @property
    def model(self) -> ResolvedModel | None:
        return self.plan.model

    @property
    def engine(self) -> EngineFacts | None:
        return self.plan.facts

    @property
    def host(self) -> HostFingerprint:
        return self.plan.host

    @property
    def claim_requested(self) -> bool:
        return self.plan.claim

    @property
    def kind(self) -> str:
        return self.plan.kind

    @property
    def random_weights(self) -> bool:
        return self.plan.random_weights

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
def open_session(plan: RunPlan) -> Iterator[Session]:
    """Launch what `plan` says, yield a Session, and always tear down and write receipt.json."""
    say, out, hw = plan.say, plan.options.out, plan.hardware
    for line in reap_stale(stale_stamps(plan.settings, out)):
        say(line)
    results = ResultsDir.create(out) if out else ResultsDir.new(plan.settings.results_dir, plan.pack.id, plan.kind)
    say(f"results → {results.path}")
    if plan.topology is not None:
        say(f"RPC split over {len(plan.topology.workers)} worker(s): "
            f"{', '.join(w.address for w in plan.topology.workers)}")
    request = plan.launch_request(results.path)
    argv = plan.engine.argv(request)
    session: Session | None = None
    endpoint: Endpoint | None = None
    sampler = MemorySampler(None, results.jsonl(MEMORY_TIMELINE), guards=plan.pack.bench.guards)
    error: str | None = None
    status: Status = "failed"
    try:
        # Sampled from before the launch, so the receipt has host memory before and after the model loads; started
        # inside the try, so the finally stops and joins its thread whatever happens from here (Ctrl-C included).
        sampler.start()
        with _signals_unwind(), plan.engine.launch(request) as endpoint:
            if endpoint.ready_s is not None:
                say(f"healthy after {endpoint.ready_s:.1f} s")
            sampler.set_pid(endpoint.pid)
            sampler.mark("model_loaded")
            hw, topo_blockers = topology_attribution(hw, endpoint.processes)
            if plan.claim and topo_blockers:
                raise ClaimRefused(f"claim refused: {topo_blockers[0]}")
            session = Session(plan=plan, results=results, hardware=hw, endpoint=endpoint, sampler=sampler,
                              ledger=Ledger(claim_failures=[*plan.preconditions, *topo_blockers]))
            yield session
            status = "complete"
    except ResultsWriteError as exc:
        error, status = str(exc), "failed"
        raise
    except ServepackError as exc:
        # An engine's error may quote its log, which may echo its argv: the message shown holds no secret either.
        exc.args = (scrub_text(str(exc), secret_values(["engine", *argv, *preset_args(plan.preset.flags)])),)
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
        _seal(plan, results, _run_facts(plan, session, endpoint, hw, argv, status, error))


def _run_facts(plan: RunPlan, session: Session | None, endpoint: Endpoint | None, hw: HardwareAttribution,
               argv: list[str], status: Status, error: str | None) -> RunFacts:
    """What the receipt records of the run: the plan's facts, the endpoint's, and what the caller recorded."""
    ledger = session.ledger if session else Ledger()
    env = plan.launch_env
    return RunFacts(
        loaded=plan.loaded, preset_name=plan.preset_name, preset=plan.preset, kind=plan.kind,
        started_at=plan.started, status=status, error=error, model=plan.model, engine=plan.facts,
        props=endpoint.props if endpoint else None, host=plan.host, hardware=hw,
        server=_server_record(endpoint, argv, plan.base_url, plan.allowed), temperature=ledger.temperature,
        claim_requested=plan.claim, notes=ledger.notes, environment=env.env if env else None,
        environment_dropped=env.dropped if env else (),
        claim_reasons=final_claim_reasons(ledger.claim_failures, started=session is not None, status=status,
                                          temperature=ledger.temperature,
                                          claims_temperature=plan.pack.claims.temperature),
        random_weights=plan.random_weights, gguf=plan.gguf.summary() if plan.gguf else None,
        gguf_error=plan.gguf_error, build=plan.build,
    )


def _seal(plan: RunPlan, results: ResultsDir, run: RunFacts) -> None:
    """Scrub the engine's logs of the run's secrets, then write the receipt hash-linked to every file."""
    secrets = run_secrets(run)
    for log in results.files():
        if log.suffix == ".log":  # the engine's own output may echo its argv
            scrub_file(log, secrets)
    files = [p for p in results.files() if p.name != RECEIPT_NAME]
    _write_receipt(build_receipt(run, results.path, files), results, plan.settings, plan.say)


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
