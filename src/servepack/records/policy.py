"""Claim policy: which hardware a run's numbers carry, and every condition that makes a run unclaimable.

The session asks here before it launches (`claim_preconditions`) and when it writes the receipt
(`final_claim_reasons`); measurers report their own blockers as values, never by mutating a session.
"""

from __future__ import annotations

from collections.abc import Iterable

from servepack.engine.build import read_build_record
from servepack.engine.locate import EngineFacts
from servepack.host.fingerprint import HostFingerprint, detected_hardware_id, match_target
from servepack.net import is_loopback_url
from servepack.packs import LoadedPack
from servepack.records.receipt import HardwareAttribution
from servepack.weights.resolve import ResolvedModel
from servepack.weights.twin import is_twin


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


def hardware_failure(hw: HardwareAttribution) -> str | None:
    if hw.target_match:
        return None
    return f"hardware: detected {hw.detected_id} ({hw.label}), not {hw.target_id}: {'; '.join(hw.failed_rules)}"


def claim_preconditions(
    loaded: LoadedPack, hw: HardwareAttribution, engine: EngineFacts | None, model: ResolvedModel | None,
    base_url: str,
) -> list[str]:
    """Every claim condition that is already known to fail before measuring."""
    failures = []
    if (hw_fail := hardware_failure(hw)) is not None:
        failures.append(hw_fail)
    if engine is None:
        failures.append("engine facts unavailable: the server was attached, not launched by servepack")
    else:
        if not engine.pin_match:
            failures.append(f"engine pin not matched: {engine.pin_reason}")
        build = read_build_record(engine.path)
        if build is not None and not build.pinned:
            failures.append(f"engine built unpinned: {'; '.join(build.unpinned_reasons) or 'see servepack-build.json'}")
    if model is None:
        failures.append("model bytes unverified: the attached server's weights were not resolved by servepack")
    else:
        if model.pin_match is not True:
            failures.append("model pin not matched: " + (
                "no sha256 pinned" if model.pin_sha256 is None
                else f"sha256 {model.sha256[:12]}… ≠ pin {model.pin_sha256[:12]}…"))
        if is_twin(model.path):
            failures.append("model is a random-weight shape twin: speed only")
    src = loaded.pack.model.source
    if src.kind == "hf" and not src.revision_is_commit:
        failures.append(f"weights revision {src.revision!r} is a branch, not a commit")
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
