"""`servepack run --dry-run`: the argv a run would execute for a pack's preset, without launching anything.

The model is resolved as a run resolves it (a GGUF file is found and hashed; a repository id or directory is
named), and the engine is located where it can be. Where the engine is not installed here (vLLM on a machine
without CUDA), an engine whose argv does not need its facts shows its bare executable name and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servepack.engine.base import LaunchRequest
from servepack.engine.catalog import get_engine
from servepack.engine.server import LOOPBACK, free_port
from servepack.errors import EngineError, UsageError
from servepack.packs import load_pack
from servepack.packs.flag_policy import allowed_now, preset_tokens, refused
from servepack.packs.schema import ENGINE_LOADED_KINDS
from servepack.redact import redact_argv
from servepack.settings import Settings
from servepack.weights.extras import extra_files
from servepack.weights.resolve import ModelRef, resolve_model, resolve_model_ref


@dataclass(frozen=True)
class LaunchPlan:
    pack_id: str
    preset: str
    engine: str
    argv: list[str] = field(default_factory=list)  # secret-bearing flag values redacted
    notes: list[str] = field(default_factory=list)


def plan_launch(pack_ref: str | None, preset: str | None = None, *, server_bin: Path | None = None,
                model_path: Path | None = None, settings: Settings | None = None) -> LaunchPlan:
    """The head process's argv for the preset (port: a free one now; a run picks its own)."""
    settings = settings or Settings.load()
    loaded = load_pack(pack_ref)
    pack = loaded.pack
    try:
        preset_name, preset_obj = pack.preset(preset)
    except KeyError as exc:
        raise UsageError(f"--preset: {exc.args[0]}") from None
    engine = get_engine(pack.engine.name, settings)
    notes: list[str] = []
    located: EngineError | None = None
    try:
        facts = engine.locate(pack.engine, server_bin)
    except EngineError as exc:
        facts, located = None, exc
    model_file: Path | None = None
    model_ref: ModelRef | None = None
    if engine.launches and pack.model.source.kind in ENGINE_LOADED_KINDS:
        model_ref = resolve_model_ref(pack.model, pack_dir=loaded.path.parent, model_path=model_path)
    elif engine.launches:
        model_file = resolve_model(pack.model, cache_dir=settings.cache_dir, pack_dir=loaded.path.parent,
                                   model_path=model_path).path
    request = LaunchRequest(
        facts=facts, pin=pack.engine, model_path=model_file, preset=preset_obj, host=LOOPBACK, port=free_port(),
        log_dir=settings.results_dir, health_timeout_s=settings.health_timeout_s,
        extra_files=extra_files(loaded, preset_obj, None) if engine.launches else {}, model_ref=model_ref,
    )
    try:
        argv = engine.argv(request)
    except EngineError:
        if located is not None:
            raise located from None
        raise
    if located is not None:
        notes.append(f"engine not located here, so argv[0] is its bare name: {located}")
    problem = refused(pack.engine.name, preset_tokens(preset_obj.flags), allowed_now(), f"preset {preset_name!r}")
    if problem is not None:
        notes.append(f"a run refuses to launch this: {problem}")
    notes.append("dry run: nothing was launched; a run picks its own free port")
    return LaunchPlan(pack_id=pack.id, preset=preset_name, engine=pack.engine.name, argv=redact_argv(argv),
                      notes=notes)
