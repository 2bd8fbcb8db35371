"""`servepack doctor`: is this machine ready to run a pack, and what is it?"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servepack.engine.locate import EngineFacts, beside, locate_binary
from servepack.errors import ServepackError
from servepack.host.fingerprint import HostFingerprint
from servepack.packs.schema import ENGINE_LOADED_KINDS, VLLM_ENGINE
from servepack.plan import RunOptions, RunPlan, plan_run
from servepack.settings import Settings
from servepack.weights.resolve import resolve_model, resolve_model_ref


@dataclass
class DoctorCheck:
    name: str
    ok: bool
    detail: str


@dataclass
class DoctorReport:
    host: HostFingerprint
    hardware: dict[str, Any]
    checks: list[DoctorCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "host": self.host.model_dump(), "hardware": self.hardware,
                "checks": [c.__dict__ for c in self.checks]}


def diagnose(pack_ref: str | None, *, server_bin: Path | None = None, model_path: Path | None = None) -> DoctorReport:
    """Host fingerprint, the engine a run would use, and the pack's model present and verified: the run's own plan
    for the pack's default preset (`plan.plan_run`, surveyed), with llama-bench beside it."""
    settings = Settings.load()
    plan = plan_run(pack_ref, None, RunOptions(server_bin=server_bin, model_path=model_path, settings=settings,
                                               survey=True))
    loaded, host = plan.loaded, plan.host
    report = DoctorReport(host=host, hardware=plan.hardware.model_dump())
    report.checks.append(DoctorCheck("nvml", host.nvml == "ok" or not host.gpus, host.nvml))
    vllm = loaded.pack.engine.name == VLLM_ENGINE
    # A llama.cpp build puts both in one bin folder; SERVEPACK_LLAMA_BENCH, when set, still names llama-bench.
    bench_bin = None if settings.binary_from_env("llama-bench") else beside("llama-bench", server_bin)
    for name, override in (("vllm", server_bin),) if vllm else (("llama-server", server_bin),
                                                               ("llama-bench", bench_bin)):
        found_beside = name == "llama-bench" and override is not None
        try:
            facts = _engine_facts(plan, name, override)
            runtime = "".join(f" · {k} {v}" for k, v in facts.runtime.items())
            chosen = "beside --server-bin" if found_beside else facts.chosen_by
            report.checks.append(DoctorCheck(name, True, f"{facts.path} ({chosen}) · "
                                             f"{facts.version_text.splitlines()[0] if facts.version_text else '?'} · "
                                             f"pin {'matched' if facts.pin_match else 'NOT matched'}: "
                                             f"{facts.pin_reason}{runtime}"))
        except ServepackError as exc:
            where = (f" (none beside --server-bin in {server_bin.expanduser().parent})"
                     if name == "llama-bench" and server_bin is not None and not found_beside else "")
            report.checks.append(DoctorCheck(name, False, f"{exc}{where}"))
    report.checks.append(_model_check(plan, settings, model_path))
    return report


def _engine_facts(plan: RunPlan, name: str, override: Path | None) -> EngineFacts:
    """The server binary as the plan located it; llama-bench (and the server of a pack whose engine attaches to a
    running server, so the plan locates none) located here."""
    if name != "llama-bench" and plan.engine.launches:
        if plan.engine_error is not None:
            raise plan.engine_error
        assert plan.facts is not None
        return plan.facts
    return locate_binary(name, plan.pack.engine, override)


def _model_check(plan: RunPlan, settings: Settings, model_path: Path | None) -> DoctorCheck:
    """The model as the plan resolved it (for a pack whose engine attaches, resolved here: the plan needs none)."""
    loaded = plan.loaded
    kind = loaded.pack.model.source.kind
    error, ref, model = plan.model_error, plan.model_ref, plan.model
    if not plan.engine.launches:
        try:
            if kind in ENGINE_LOADED_KINDS:
                ref = resolve_model_ref(loaded.pack.model, pack_dir=loaded.path.parent, model_path=model_path)
            else:
                model = resolve_model(loaded.pack.model, cache_dir=settings.cache_dir, pack_dir=loaded.path.parent,
                                      model_path=model_path)
        except ServepackError as exc:
            error = exc
    if error is not None:
        return DoctorCheck("model", False, str(error))
    if ref is not None:
        return DoctorCheck("model", True, f"{ref.ref} @ {ref.revision or 'no pinned revision'} "
                           "(loaded by the engine itself; servepack hashes no weights)")
    assert model is not None
    pin = {True: "matches the pin", False: "DOES NOT match the pin", None: "no pin"}[model.pin_match]
    return DoctorCheck("model", model.pin_match is not False, f"{model.path} sha256 {model.sha256} ({pin})")
