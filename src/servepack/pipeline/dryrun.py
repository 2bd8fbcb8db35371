"""`servepack run --dry-run`: the argv a run would execute for a pack's preset, without launching anything.

It is the run's own plan (`plan.plan_run`, surveyed): the model is resolved as a run resolves it (a GGUF file is
found and hashed; a repository id or directory is named), an RPC split is split, and the engine is located where
it can be. Where the engine is not installed here (vLLM on a machine without CUDA), an engine whose argv does not
need its facts shows its bare executable name and says so; a flag a run would refuse is said, not raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servepack.errors import EngineError
from servepack.plan import RunOptions, plan_run
from servepack.redact import redact_argv
from servepack.settings import Settings


@dataclass(frozen=True)
class LaunchPlan:
    pack_id: str
    preset: str
    engine: str
    argv: list[str] = field(default_factory=list)  # secret-bearing flag values redacted
    notes: list[str] = field(default_factory=list)


def plan_launch(pack_ref: str | None, preset: str | None = None, *, server_bin: Path | None = None,
                model_path: Path | None = None, settings: Settings | None = None) -> LaunchPlan:
    """The head process's argv for the preset, from the run's own plan (port: a free one now; a run picks its own)."""
    plan = plan_run(pack_ref, preset, RunOptions(server_bin=server_bin, model_path=model_path, settings=settings,
                                                 survey=True))
    located = plan.engine_error
    if located is not None and not isinstance(located, EngineError):
        raise located
    for problem in (plan.model_error, plan.extras_error):  # what a dry run cannot show an argv without
        if problem is not None:
            raise problem
    try:
        argv = plan.engine.argv(plan.launch_request(plan.settings.results_dir))
    except EngineError:
        if located is not None:
            raise located from None
        raise
    notes: list[str] = []
    if located is not None:
        notes.append(f"engine not located here, so argv[0] is its bare name: {located}")
    notes.extend(plan.notes)  # a flag a run refuses
    notes.append("dry run: nothing was launched; a run picks its own free port")
    return LaunchPlan(pack_id=plan.pack.id, preset=plan.preset_name, engine=plan.pack.engine.name,
                      argv=redact_argv(argv), notes=notes)
