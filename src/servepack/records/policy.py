"""Claim policy: which hardware a run's numbers carry, and every condition that makes a run unclaimable.

The plan asks here before a run launches (`claim_preconditions`), the session when it writes the receipt
(`final_claim_reasons`); measurers report their own blockers as values, never by mutating a session.
"""

from __future__ import annotations

from collections.abc import Iterable

from servepack.bench.sample import metric_field
from servepack.bench.stats import MIN_INTERVAL_N, half_width_pct
from servepack.bench.summary import BenchSummary, Cell
from servepack.engine.base import EngineProcess
from servepack.engine.buildrecord import BuildRecord
from servepack.engine.locate import EngineFacts
from servepack.host.fingerprint import HostFingerprint, detected_hardware_id, match_target
from servepack.net import is_loopback_url
from servepack.packs import LoadedPack
from servepack.packs.schema import ENGINE_LOADED_KINDS, ClaimsPolicy, HfRepoSource, HfSource
from servepack.records.receipt import HardwareAttribution, TopologyHost
from servepack.weights.resolve import ResolvedModel


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


def topology_attribution(
    hw: HardwareAttribution, processes: list[EngineProcess],
) -> tuple[HardwareAttribution, list[str]]:
    """An RPC split's attribution: every host by its detected id, and the id the numbers carry names them all
    (`rpc.<head>.<worker>…`). A worker that served no fingerprint is not identified, which blocks a claim."""
    workers = [p for p in processes if p.role == "rpc-worker"]
    if not workers:
        return hw, []
    heads = [p for p in processes if p.role != "rpc-worker"]
    hosts: list[TopologyHost] = []
    blockers: list[str] = []
    for p in [*heads[:1], *workers]:
        fp = p.fingerprint
        hosts.append(TopologyHost(role=p.role, endpoint=p.endpoint,
                                  detected_id=detected_hardware_id(fp) if fp else None,
                                  label=fp.label() if fp else None))
        if fp is None:
            blockers.append(f"hardware: {p.role} {p.endpoint or p.host} not identified (it served no fingerprint; "
                            "run it with `servepack worker`)")
    ids = [h.detected_id or "unidentified" for h in hosts]
    label = " + ".join(f"{h.role} {h.label or 'unidentified'}" for h in hosts)
    return hw.model_copy(update={"topology": hosts, "attributed_id": ".".join(["rpc", *ids]),
                                 "label": label}), blockers


def hardware_failure(hw: HardwareAttribution) -> str | None:
    if hw.target_match:
        return None
    return f"hardware: detected {hw.detected_id} ({hw.label}), not {hw.target_id}: {'; '.join(hw.failed_rules)}"


def claim_preconditions(
    loaded: LoadedPack, hw: HardwareAttribution, engine: EngineFacts | None, model: ResolvedModel | None,
    base_url: str, *, build: BuildRecord | None, random_weights: bool,
) -> list[str]:
    """Every claim condition that is already known to fail before measuring.

    `build` (the engine's build record) and `random_weights` (the model's twin mark) are read once by the caller.
    """
    failures = []
    if (hw_fail := hardware_failure(hw)) is not None:
        failures.append(hw_fail)
    if engine is None:
        failures.append("engine facts unavailable: the server was attached, not launched by servepack")
    else:
        if not engine.pin_match:
            failures.append(f"engine pin not matched: {engine.pin_reason}")
        if build is not None and not build.pinned:
            failures.append(f"engine built unpinned: {'; '.join(build.unpinned_reasons) or 'see servepack-build.json'}")
    src = loaded.pack.model.source
    if model is None and src.kind in ENGINE_LOADED_KINDS:
        failures.append(f"model bytes unverified: engine {loaded.pack.engine.name} loads the {src.kind} model "
                        "itself; servepack hashed no weights")
    elif model is None:
        failures.append("model bytes unverified: the attached server's weights were not resolved by servepack")
    else:
        if model.pin_match is not True:
            failures.append("model pin not matched: " + (
                "no sha256 pinned" if model.pin_sha256 is None
                else f"sha256 {model.sha256[:12]}… ≠ pin {model.pin_sha256[:12]}…"))
        if random_weights:
            failures.append("model is a random-weight shape twin: speed only")
    if isinstance(src, HfSource | HfRepoSource) and not src.revision_is_commit:
        failures.append(f"weights revision {src.revision!r} is a branch, not a commit" if src.revision
                        else "weights revision not pinned: model.source.revision is absent")
    if not is_loopback_url(base_url):
        failures.append(f"base URL {base_url} is not on this machine")
    return failures


def final_claim_reasons(
    recorded: Iterable[str], *, started: bool, status: str, temperature: float | None, claims_temperature: float,
) -> list[str]:
    """The claim reasons a receipt states: the run's recorded blockers plus its end state and temperature."""
    failures = list(recorded) if started else ["run did not start"]
    if status != "complete":
        failures.append(f"run {status}")
    if temperature is not None and temperature != claims_temperature:
        failures.append(f"temperature {temperature} ≠ claims temperature {claims_temperature}")
    return failures


def judged_metric(claims: ClaimsPolicy) -> str:
    """The Cell field whose interval the claim gate judges: the pack's headline metric."""
    h = claims.headline
    return metric_field(h.metric, h.source)


def cell_quality(cell: Cell, claims: ClaimsPolicy) -> list[str] | None:
    """Why a cell's figures are not claim-grade ([] when they are): an unwatched host, too few clean samples or a
    wide interval; for a cell recorded before samples were set aside, any contended or stalled sample.

    Since samples are set aside (`Cell.n_clean` recorded), every figure is computed from clean samples only, so a
    cell is claim-grade when its clean samples reach the interval target; otherwise the reason says how many clean
    samples it got and how many were set aside, and why. None for a cell recorded before servepack watched the
    host and sampled to a target (no quality facts).
    """
    if cell.contended is None and cell.interval is None:
        return None
    problems = []
    legacy = cell.n_clean is None
    if cell.contended is None:
        problems.append("host not watched")
    elif cell.contended and legacy:
        why = f" ({cell.contention[0]})" if cell.contention else ""
        problems.append(f"{cell.contended}/{cell.n} samples contended{why}")
    if cell.stalls and legacy:
        problems.append(f"{cell.stalls} stalled request{'s' if cell.stalls > 1 else ''}")
    metric = judged_metric(claims)
    stat = getattr(cell, metric)
    hw = half_width_pct(stat)
    target = claims.interval_target_pct
    width: str | None = None
    if stat.n == 0:
        width = f"no {metric} samples"
    elif stat.n < MIN_INTERVAL_N or hw is None:
        width = f"{metric}: too few for an interval (n={stat.n} < {MIN_INTERVAL_N})"
    elif hw > target:
        width = (f"{metric} median {stat.median:,.2f}, 95% interval ±{hw:.1f}% > target ±{target:g}% "
                 f"(n={stat.n})")
    if cell.figures_contended:
        problems.append(f"no clean sample: the figures are from contended ones; {cell.set_aside_text()}")
    elif width is not None:
        if not legacy and cell.n_set_aside:
            width += f"; {cell.n_clean} clean, {cell.set_aside_text()}"
        problems.append(width)
    return problems


def noisy_reason(summary: BenchSummary, claims: ClaimsPolicy) -> str | None:
    """'noisy: …' naming each cell that is not claim-grade and why, in figures; None when every cell is."""
    parts = []
    for cell in summary.cells:
        problems = cell_quality(cell, claims)
        if problems is None:
            problems = ["measurement quality not recorded"]
        if problems:
            parts.append(f"ctx {cell.context_tokens:,} × c{cell.concurrency}: {'; '.join(problems)}")
    return "noisy: " + " · ".join(parts) if parts else None
