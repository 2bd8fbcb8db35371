"""`servepack reproduce`: run a registry record's own launch and protocol here, and say whether its numbers hold.

The record's tokenized launch becomes a preset (`reproduce.translate`) served through the engine seam by a normal
session; the weights are the local file (`--model-file`, or the pack's), checked against the record's model pin
before anything starts. The bench runs the record's cells with its output length and sample count, fresh
prompts. Then each metric gets its verdict from the one run-vs-record judgement (`reproduce.verdict`, on the facts of
the session that ran, as `compare RUN RECORD` and the report read them from its receipt), `reproduce.json` goes into
the run's results directory (under its receipt), and the run is exported as registry records naming the original.
`compare_to_record` is `servepack compare RUN RECORD`: that judgement on a results directory.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from servepack.engine.base import Engine, LaunchRequest
from servepack.engine.catalog import get_engine
from servepack.engine.locate import EngineFacts
from servepack.engine.server import LOOPBACK, free_port
from servepack.errors import EngineError, ModelError, ServepackError, UsageError
from servepack.host.fingerprint import detected_hardware_id, fingerprint
from servepack.packs import LoadedPack, load_pack
from servepack.packs.loader import shipped_pack_paths
from servepack.packs.schema import EnginePin, Preset
from servepack.pipeline.bench import bench_in_session
from servepack.pipeline.evidence import evidence_after
from servepack.plan import RunOptions, plan_run
from servepack.progress import Progress, quiet
from servepack.records.policy import attribution
from servepack.redact import redact_argv, secret_values
from servepack.registry.db import RegistryDB, default_db_path, resolve
from servepack.registry.export import check_export_dir, export_run, validate
from servepack.registry.format import LoadedRecord, read_record_bytes
from servepack.registry.format.check import canonical_bytes
from servepack.registry.format.launch import describe_launch
from servepack.reproduce import DEFAULT_TOLERANCE_PCT
from servepack.reproduce.protocol import CannotReproduce, Protocol, RecordFacts
from servepack.reproduce.provenance import Original, amend, sentence
from servepack.reproduce.report import ReproduceReport, VerdictRow
from servepack.reproduce.translate import NoTranslation, Translation
from servepack.reproduce.verdict import (
    FactCheck,
    Judgement,
    LocalFacts,
    MetricVerdict,
    RecordSide,
    comparability,
    hardware_ids,
    judge_run_dir,
    not_comparable,
    record_side,
    run_facts,
    sweep_beside,
    verdicts,
)
from servepack.safepath import is_inside
from servepack.session import open_session
from servepack.settings import Settings
from servepack.store import check_new_out, check_out, refuse_sealed, register_secrets, write_bytes_atomic
from servepack.weights.hashcache import HashCache
from servepack.weights.resolve import ResolvedModel, resolve_model

REPORT_NAME = "reproduce.json"
PRESET_NAME = "reproduce"


@dataclass
class ReproduceRequest:
    record: str
    pack_ref: str | None = None
    model_file: Path | None = None
    server_bin: Path | None = None
    dry_run: bool = False
    samples: int | None = None
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    out: Path | None = None
    export: Path | None = None
    db: Path | None = None


@dataclass
class ReproduceOutcome:
    original: Original
    facts: RecordFacts
    translation: Translation
    argv: list[str]
    protocol: Protocol | None
    checks: list[FactCheck]
    pack_id: str | None
    dry_run: bool
    tolerance_pct: float
    verdicts: list[MetricVerdict] = field(default_factory=list)
    run_dir: Path | None = None
    exported: tuple[Path, ...] | None = None  # recipe, speed sweep (and a CPU box's lab run)
    export_error: str | None = None
    export_not_submittable: list[str] = field(default_factory=list)  # why the export cannot be submitted as is
    recorded_launch: list[tuple[str, str]] = field(default_factory=list)  # every part, as the record states it

    @property
    def comparable(self) -> bool:
        return all(c.state == "same" for c in self.checks)

    @property
    def not_reproduced(self) -> list[str]:
        return [f"{v.metric} at {v.cell}: {v.verdict}: {v.reason}" for v in self.verdicts if v.verdict != "REPRODUCED"]

    def report(self) -> ReproduceReport:
        p = self.protocol
        return ReproduceReport(
            record={"id": self.original.id, "sha256": self.original.sha256, "source": self.original.source,
                    "origin_url": self.original.origin_url, "held": self.original.held},
            pack=self.pack_id, dry_run=self.dry_run, comparable=self.comparable,
            comparability=[{"what": c.what, "state": c.state, "detail": c.detail} for c in self.checks],
            launch={"recorded": redact_argv(["record", *self.translation.recorded_argv])[1:],
                    "recorded_where": self.facts.arguments_where,
                    "argv": self.argv, "flags": self.translation.flags,
                    "rewrites": [asdict(r) for r in self.translation.rewrites],
                    "as_recorded": [{"part": k, "value": v} for k, v in self.recorded_launch]},
            protocol=None if p is None else {
                "context_marks": list(p.context_marks), "gen_tokens": p.gen_tokens, "samples": p.samples,
                "concurrency": list(p.concurrency), "warmup": p.warmup, "cache_prompt": p.cache_prompt,
                "notes": list(p.notes),
                "cells": [{"cell": c.label, "samples": c.samples,
                           "figures": {m: {"median": f.median, "samples": list(f.samples), "source": f.source}
                                       for m, f in c.figures.items()}} for c in p.cells]},
            tolerance_pct=self.tolerance_pct,
            verdicts=[VerdictRow.model_validate(v.as_dict()) for v in self.verdicts],
            not_reproduced=self.not_reproduced,
            run_dir=str(self.run_dir) if self.run_dir else None,
            exported=[str(x) for x in self.exported] if self.exported else None,
            export_error=self.export_error,
        )

    def as_dict(self) -> dict[str, Any]:
        return self.report().model_dump(mode="json")


@dataclass
class LaunchShown:
    """`reproduce --dry-run` of a record servepack cannot run here: its launch as the record states it (every part:
    image, env, mounts, script steps, a lab profile's config and args) and why it would not run here."""

    original: Original
    kind: str
    launch: list[tuple[str, str]]
    why_not: str
    dry_run: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"record": {"id": self.original.id, "sha256": self.original.sha256, "source": self.original.source,
                           "origin_url": self.original.origin_url, "held": self.original.held},
                "kind": self.kind, "dry_run": True, "runs_here": False, "why_not": self.why_not,
                "launch": {"as_recorded": [{"part": k, "value": v} for k, v in self.launch]}}


def resolve_record(arg: str, db: Path | None = None) -> tuple[LoadedRecord, Original]:
    """A record file, or the newest version of a registry id in the local registry; with what names it.

    A held record's sha256 and source are those of the bytes the registry imported (its provenance).
    """
    loaded, stored = resolve(arg, db)
    r = loaded.record
    launch = r.get("launch") or {}
    origin = launch.get("url") if isinstance(launch.get("url"), str) else None
    if stored is None:
        sha, source, held = hashlib.sha256(read_record_bytes(loaded.path)).hexdigest(), str(loaded.path), None
    else:
        prov = next((p for p in stored.sources if p.source == str(loaded.path)), stored.sources[0])
        sha, source = prov.sha256, prov.source
        held = f"registry id {stored.id} version {stored.version} of {stored.versions}"
    return loaded, Original(id=loaded.id, sha256=sha, source=source, origin_url=origin, held=held)


def _held_sweep(loaded: LoadedRecord, db: Path | None) -> LoadedRecord | None:
    """The record's speed sweep as the local registry holds it, when it holds one."""
    path = db or default_db_path()
    if not path.is_file():
        return None
    with RegistryDB.open(path) as opened:
        sweeps = opened.sweeps_of(str(loaded.record.get("id")))
    return sweeps[0].loaded if sweeps else None


def _pack_for(facts: RecordFacts, pack_ref: str | None) -> LoadedPack | None:
    """PACK when given; else the shipped pack the record names, or the one serving its model instance."""
    if pack_ref is not None:
        return load_pack(pack_ref)
    shipped = shipped_pack_paths()
    if facts.pack_id in shipped:
        return load_pack(facts.pack_id)
    for pid in sorted(shipped):
        loaded = load_pack(pid)
        if loaded.pack.model.model_instance_id == facts.model_instance_id:
            return loaded
    return None


@dataclass
class _Local:
    here: LocalFacts
    engine: Engine
    engine_facts: EngineFacts | None = None
    engine_error: ServepackError | None = None
    model_path: Path | None = None
    model: ResolvedModel | None = None  # the model file, hashed: the session serves it as it is (hashed once)
    model_error: ServepackError | None = None


def _local(facts: RecordFacts, pack: LoadedPack | None, req: ReproduceRequest, say: Progress,
           launch_flags: dict[str, Any]) -> _Local:
    """This host, the engine build that would serve, the model file that would be served, with their hashes, and
    the flags it would serve with (the record's launch as translated)."""
    engine = get_engine(facts.engine_name)
    if not engine.launches:
        raise UsageError(f"the record's engine {facts.engine_name!r} attaches to a running server; reproduce "
                         "launches the record's own command")
    if pack is not None and pack.pack.engine.name != facts.engine_name:
        raise UsageError(f"pack {pack.pack.id} serves with {pack.pack.engine.name!r}, the record with "
                         f"{facts.engine_name!r}; give a pack of the record's engine")
    host = fingerprint()
    ids = hardware_ids(host, detected_hardware_id(host), attribution(host, pack).attributed_id if pack else None)
    out = _Local(LocalFacts(hardware_ids=ids, hardware_label=host.label()), engine)
    engine_fields: dict[str, Any] = {}
    if pack is None:
        out.engine_error = UsageError("no pack names an engine build for this record's model; give PACK")
    else:
        try:
            out.engine_facts = f = engine.locate(pack.pack.engine, req.server_bin)
            if f is not None:
                engine_fields = {"engine_version": f.version_text, "engine_sha256": f.sha256,
                                 "engine_commit": f.commit}
        except EngineError as exc:
            out.engine_error = exc
    model_fields: dict[str, Any] = {}
    try:
        out.model = _model(pack, req, say)
        out.model_path, sha = out.model.path, out.model.sha256
        model_fields = {"model_sha256": sha, "model_path": str(out.model_path)}
    except (ModelError, UsageError) as exc:
        out.model_error = exc
    out.here = LocalFacts(
        hardware_ids=out.here.hardware_ids, hardware_label=out.here.hardware_label,
        engine_unknown=str(out.engine_error) if out.engine_error else None,
        model_unknown=str(out.model_error) if out.model_error else None,
        model_instance_id=pack.pack.model.model_instance_id if pack else None,
        pack_model_sha256=pack.pack.model.sha256 if pack else None, launch_flags=launch_flags, **engine_fields,
        **model_fields)
    return out


def _model(pack: LoadedPack | None, req: ReproduceRequest, say: Progress) -> ResolvedModel:
    """--model-file, else the pack's cached model; the sha256 of its bytes (cached by file identity; read again for
    a run under SERVEPACK_VERIFY_MODEL, as a run's own resolve would)."""
    settings = Settings.load()
    if req.model_file is not None:
        if not req.model_file.is_file():
            raise UsageError(f"--model-file {req.model_file}: not a file")
        say(f"hashing {req.model_file} (cached by file identity)")
        hashes = HashCache.under(settings.cache_dir)
        sha = hashes.sha256(req.model_file, force=settings.verify_model and not req.dry_run)
        pin = pack.pack.model.sha256 if pack is not None else None
        return ResolvedModel(req.model_file, sha, req.model_file.stat().st_size, pin, sha == pin, "override",
                             hashed_now=hashes.hashed > 0)
    if pack is None:
        raise UsageError("no --model-file and no pack to take the model from; pass --model-file PATH")
    return resolve_model(pack.pack.model, cache_dir=settings.cache_dir, pack_dir=pack.path.parent)


def _argv(local: _Local, pack: LoadedPack | None, facts: RecordFacts, preset: Preset) -> list[str]:
    """The launch as the engine would execute it; what is not here yet shows as <placeholder>."""
    engine_facts = local.engine_facts or EngineFacts(
        name="llama-server", path=Path("<llama-server: not located>"), chosen_by="flag", sha256="-", version_text="",
        package=None, package_version=None, commit=None, pin_match=False, pin_reason="not located")
    # Only the argv is built here; a record with no pack has no pin to validate.
    pin = pack.pack.engine if pack else EnginePin.model_construct(name=facts.engine_name, repo=facts.id)
    req = LaunchRequest(facts=engine_facts, pin=pin, model_path=local.model_path or Path("<model file>"),
                        preset=preset, host=LOOPBACK, port=free_port(), log_dir=Path("<results>"),
                        health_timeout_s=0)
    return local.engine.argv(req)


def _side(loaded: LoadedRecord, original: Original, db: Path | None) -> RecordSide:
    """The record as the judgement reads it, with its speed sweep beside its file or held in the registry."""
    sweep = sweep_beside(loaded) or (_held_sweep(loaded, db) if original.held else None)
    return record_side(loaded, sweep, source=original.held or str(loaded.path))


def compare_to_record(run_dir: Path, ref: str, db: Path | None = None,
                      tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> Judgement:
    """`servepack compare RUN RECORD`: a results directory against a record (a file or a registry id), by the one
    judgement `reproduce` and the report use."""
    loaded, original = resolve_record(ref, db)
    return judge_run_dir(run_dir, _side(loaded, original, db), tolerance_pct=tolerance_pct)


def prepare(req: ReproduceRequest, say: Progress) -> tuple[ReproduceOutcome, LoadedPack | None, _Local]:
    """Everything short of launching: the record, its translation and protocol, and the comparability facts."""
    loaded, original = resolve_record(req.record, req.db)
    if req.db is not None and original.held is None:
        # RECORD is a file, so the id was not looked up there: --db is still opened and checked now (a registry
        # database, read, never made), as every file a command names is, before anything is launched
        with RegistryDB.open(req.db):
            pass
    if "engine_profile_file" in loaded.related:  # found beside a lab recipe's file; without one, the refusal says them
        for line in loaded.related.get("engine_profile_skipped") or []:  # passed over on the way
            say(line)
    side = _side(loaded, original, req.db)
    facts = side.facts
    # a record's --api-key (or key file) never reaches reproduce.json, the run's files or the exports
    register_secrets(secret_values(["record", *facts.arguments], read_key_files=False))
    if side.launch_error is not None:
        raise side.launch_error
    assert side.translation is not None
    translation, protocol = side.translation, side.protocol
    preset = translation.preset(f"reproduction of registry record {facts.id}")
    pack = _pack_for(facts, req.pack_ref)
    local = _local(facts, pack, req, say, dict(translation.flags))
    checks = comparability(facts, local.here, translation)
    translation = translation.localized(
        binary=str(local.engine_facts.path) if local.engine_facts else None,
        model=str(local.model_path) if local.model_path else None)
    outcome = ReproduceOutcome(original=original, facts=facts, translation=translation,
                               argv=_argv(local, pack, facts, preset), protocol=protocol, checks=checks,
                               pack_id=pack.pack.id if pack else None, dry_run=req.dry_run,
                               tolerance_pct=req.tolerance_pct, recorded_launch=describe_launch(loaded))
    return outcome, pack, local


def _refusals(o: ReproduceOutcome, pack: LoadedPack | None, local: _Local) -> None:
    """Before launching: the record's weights, an engine, a pack and a protocol, or a one-line reason."""
    model = next(c for c in o.checks if c.what == "model")
    if model.state == "differs":
        raise ModelError(f"refused: {model.detail}; pass --model-file with the record's weights")
    if local.model_error is not None:
        raise local.model_error
    if local.engine_error is not None:
        raise local.engine_error
    if pack is None:
        raise UsageError(f"no pack serves model instance {o.facts.model_instance_id}; give PACK")
    if o.protocol is None:
        raise UsageError(f"{o.original.source}: the record states no protocol (no cell in its notes, no speed "
                         "sweep beside it); nothing to measure")
    if not o.protocol.cells:
        raise UsageError(f"{o.original.source}: every cell of the record's protocol is above its launch's slots "
                         f"({'; '.join(o.protocol.notes[-1:])}); nothing it measured can be measured so here")


def export_reproduction(run_dir: Path, out_dir: Path, original: Original, report: dict[str, Any],
                        not_submittable: list[str] | None = None) -> tuple[Path, ...]:
    """servepack's registry export of the run (`registry export`: the same files, in the registry's layout, a CPU box
    in the registry's lab format), its recipe and speed sweep naming the original record; validated, then written.
    Returns the recipe's and the speed sweep's paths, and the lab run's for a CPU box; `not_submittable` gets why the
    export cannot be submitted as is (a field the run cannot state truthfully, a CPU card the lab does not publish),
    as `registry export` says it."""
    refuse_sealed(out_dir, "--export")
    check_out(out_dir, "the export directory")
    with tempfile.TemporaryDirectory(prefix="servepack-reproduce-") as tmp:
        res = export_run(run_dir, Path(tmp) / "export")
        rel = {k: p.relative_to(res.out_dir).as_posix() for k, p in (("recipe", res.recipe),
                                                                     ("sweep", res.speed_sweep))}
        files = {name: path.read_bytes() for name, path in res.written.items()}
        lab_rel = res.lab_run.relative_to(res.out_dir).as_posix() if res.lab_run else None
        if not_submittable is not None:
            not_submittable += [g.line() for g in res.gaps] + ([res.card_problem] if res.card_problem else [])
    recipe, sweep = json.loads(files[rel["recipe"]]), json.loads(files[rel["sweep"]])
    recipe, sweep = amend(recipe, sweep, original, at=recipe["provenance"]["captured_at"], report=report)
    validate("recipe", recipe, f"reproduction export of {run_dir}")
    validate("speed_sweep", sweep, f"reproduction export of {run_dir}")
    files[rel["recipe"]], files[rel["sweep"]] = canonical_bytes(recipe), canonical_bytes(sweep)
    if lab_rel is not None:  # the lab run names the record it reproduces, as the recipe does
        lab = json.loads(files[lab_rel])
        lab["evidence"]["servepack"]["reproduces"] = {"record_id": original.id, "record_sha256": original.sha256}
        files[lab_rel] = canonical_bytes(lab)
    for name in files:
        if (out_dir / name).exists():
            raise UsageError(f"{out_dir / name} exists; results are append-only, choose a new --export directory")
    written = {name: write_bytes_atomic(out_dir / name, data) for name, data in files.items()}
    return (written[rel["recipe"]], written[rel["sweep"]], *((written[lab_rel],) if lab_rel else ()))


def dry_run(req: ReproduceRequest, progress: Progress | None = None) -> ReproduceOutcome | LaunchShown:
    """`reproduce --dry-run`: the translated launch, protocol and facts of a record servepack can run; for one it
    cannot run here (no command it can run, an engine without a translation), its launch as recorded and why not.
    A record that cannot be read or breaks the registry's rules is still refused (exit 2)."""
    req = replace(req, dry_run=True)
    try:
        return prepare(req, progress or quiet)[0]
    except (CannotReproduce, NoTranslation) as exc:
        loaded, original = resolve_record(req.record, req.db)
        return LaunchShown(original, loaded.kind, describe_launch(loaded), str(exc))


def reproduce(req: ReproduceRequest, progress: Progress | None = None) -> ReproduceOutcome:
    """Dry run: the translation, protocol and facts. Otherwise launch, measure, judge, record and export; then
    MEASURED.md and report.html in the run's folder, as `servepack bench` leaves them, and after a failure once the
    session has started too (what was measured, the run marked partial with its error; the error is still raised)."""
    say = progress or quiet
    started: list[tuple[Path, LoadedPack]] = []  # the run's folder and pack, once its session has opened
    try:
        o = _reproduce(req, say, started)
    except BaseException:
        for run_dir, pack in started:
            evidence_after(run_dir, pack.pack, say)
        raise
    for run_dir, pack in started:
        evidence_after(run_dir, pack.pack, say, write_errors=True)
    return o


def _reproduce(req: ReproduceRequest, say: Progress, started: list[tuple[Path, LoadedPack]]) -> ReproduceOutcome:
    if req.out is not None and not req.dry_run:
        check_new_out(req.out)  # before the model is hashed or the engine asked
    o, pack, local = prepare(req, say)
    if req.dry_run:
        return o
    _refusals(o, pack, local)
    assert pack is not None and o.protocol is not None
    if req.export is not None:
        if req.out is not None and is_inside(req.out, req.export):  # sealed when the run ends: export refused then
            raise UsageError(f"--export {req.export} lies inside --out {req.out}, the run's results directory, "
                             "which is sealed when the run ends; put the export beside it")
        check_export_dir(req.export, "--export")
    preset = o.translation.preset(f"reproduction of registry record {o.facts.id}")
    ref = pack.pack.id if pack.shipped else str(pack.path)
    # the model hashed and the engine located for the comparability facts are the ones the session serves
    with open_session(plan_run(ref, PRESET_NAME, RunOptions(preset_override=preset, out=req.out, kind="reproduce",
                      server_bin=req.server_bin, model_path=req.model_file, progress=say, model=local.model,
                      facts=local.engine_facts))) as session:
        o.argv = session.endpoint.processes[0].argv if session.endpoint.processes else o.argv
        started.append((session.results.path, pack))  # its evidence is written whatever happens next
        summary = bench_in_session(session, say, **o.protocol.bench_overrides(req.samples))
        # the facts of what ran, as its receipt will record them: the judgement `compare` and the report make of it
        model = (session.model.sha256, str(session.model.path)) if session.model else None
        ran = run_facts(session.host, session.hardware, session.engine, model, dict(session.preset_obj.flags))
        o.checks = comparability(o.facts, ran, o.translation)
        o.verdicts = verdicts(o.protocol, summary, not_comparable(o.checks), req.tolerance_pct)
        o.run_dir = session.results.path
        session.results.write_json(REPORT_NAME, o.report())
        session.record(notes=[sentence(o.original, [v.as_dict() for v in o.verdicts])])
    run_dir = session.results.path
    export_dir = req.export or run_dir.with_name(f"{run_dir.name}.registry")
    report = {"tolerance_pct": req.tolerance_pct, "comparable": o.comparable,
              "comparability": [c.line() for c in o.checks],
              "verdicts": [{k: v.as_dict()[k] for k in ("cell", "metric", "verdict", "reason")} for v in o.verdicts]}
    try:
        o.exported = export_reproduction(run_dir, export_dir, o.original, report, o.export_not_submittable)
    except ServepackError as exc:
        o.export_error = str(exc)
    return o
