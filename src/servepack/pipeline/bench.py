"""Bench jobs the CLI calls: bench a pack's launched endpoint, bench an attached server, run llama-bench."""

from __future__ import annotations

import os
import re
import resource
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from servepack.bench.config import MAX_CONCURRENCY, BenchSettings
from servepack.bench.llama_bench import LlamaBenchFailed, LlamaBenchResult, read_result, run_llama_bench
from servepack.bench.runner import run_bench
from servepack.bench.summary import BenchSummary, claim_blockers
from servepack.engine.attach import attach
from servepack.engine.llamacpp import read_props
from servepack.engine.locate import locate_binary
from servepack.errors import EngineError, UsageError
from servepack.host.contention import ContentionWatch, ExcludeSet, listening_pid
from servepack.host.energy import energy_note
from servepack.host.fingerprint import gpu_bandwidth_gbs
from servepack.host.memory import MemorySampler
from servepack.packs import load_pack
from servepack.packs.schema import BenchPlan, ClaimsPolicy, FlagValue, Headline
from servepack.pipeline.evidence import evidence_after
from servepack.plan import RunOptions, plan_run
from servepack.progress import Progress
from servepack.records.policy import noisy_reason
from servepack.session import MEMORY_TIMELINE, Session, open_session
from servepack.settings import Settings
from servepack.store import ResultsDir, check_new_out
from servepack.weights.resolve import resolve_model

LLAMA_BENCH_NAME = "llama_bench.json"
CONTENTION_NAME = "host_contention.json"


def watch_for(session: Session) -> ContentionWatch:
    """A contention watch excluding servepack's own process tree and every process behind the endpoint."""
    local = {"127.0.0.1", "::1", "localhost", socket.gethostname()}
    pids = [p.pid for p in session.endpoint.processes if p.pid and p.host in local]  # a remote pid means nothing here
    return ContentionWatch(ExcludeSet([os.getpid(), *pids]))


def host_note(summary: BenchSummary) -> list[str]:
    """One line for the receipt's notes: how contended the bench's host was."""
    h = summary.host
    if h is None:
        return []

    def f(v: float | None) -> str:
        return "?" if v is None else f"{v:.2f}"

    top = f"; biggest others: {', '.join(h.top[:3])}" if h.top else ""
    return [f"host: {h.samples_contended}/{h.samples} bench samples contended ({h.policy}); others max "
            f"{f(h.others_cores_max)} cores, load {f(h.load1_min)}–{f(h.load1_max)}{top}"]


def set_aside_notes(summary: BenchSummary) -> list[str]:
    """One line per cell with samples set aside: how many, why, and that its figures are the clean ones."""
    return [f"bench ctx {c.context_tokens:,} × c{c.concurrency}: {c.set_aside_text()}; kept in requests.jsonl "
            f"(set_aside), in no figure; the figures are its {c.n_clean} clean samples"
            for c in summary.cells if c.n_set_aside]


def settings_for_session(session: Session, **overrides: Any) -> BenchSettings:
    """The pack's bench plan, plus the model file and the target's bandwidth when the hardware matches."""
    pack = session.pack
    bw = pack.hardware.memory_bandwidth_gbs if session.hardware.target_match else None
    source = f"hardware record {pack.hardware.id}" if bw else None
    offloaded = session.preset_obj.flags.get("n-gpu-layers", session.preset_obj.flags.get("ngl", 0)) not in (0, "0")
    if bw is None and offloaded and session.host.gpus:
        # Weights live in GPU memory: the host RAM probe would understate the ceiling many times over.
        name = session.host.gpus[0].name
        bw = gpu_bandwidth_gbs(name)
        source = f"published peak of {name}" if bw else None
    return bench_settings(
        pack.bench, pack.claims, model_path=str(session.model.path) if session.model else None,
        memory_bandwidth_gbs=bw,
        bandwidth_source=source, **overrides,
    )


# File descriptors a bench needs beside its streams: the sync client, the metrics poller, logs, timelines, Python.
FD_RESERVE = 64


def client_stream_limit() -> int:
    """How many concurrent streams this process can hold open: the open-file limit less a reserve, and the cap."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fds = MAX_CONCURRENCY if soft == resource.RLIM_INFINITY else max(1, soft - FD_RESERVE - 4)
    return min(MAX_CONCURRENCY, fds)


def check_client_limits(concurrency: tuple[int, ...] | list[int], flag: str = "--concurrency") -> None:
    """UsageError, before any server starts, for more concurrent streams than this client can hold open."""
    want, limit = max(concurrency), client_stream_limit()
    if want > limit:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        why = (f"the open-file limit is {soft} (`ulimit -n`)" if limit < MAX_CONCURRENCY else
               f"no bench opens more than {MAX_CONCURRENCY} streams")
        raise UsageError(f"concurrency {want}: this client can hold at most {limit} concurrent streams ({why}); "
                         f"lower {flag} (a llama-server serves at most its slots at once)")


def preset_slots(flags: Mapping[str, FlagValue]) -> int | None:
    """The slots a preset asks llama-server for (`parallel` / `np`), when it says."""
    for name in ("parallel", "np"):
        value = flags.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_slots(concurrency: tuple[int, ...] | list[int], slots: int | None, source: str) -> None:
    """UsageError when a cell would send more concurrent requests than the server has slots: the rest queue."""
    want = max(concurrency)
    if slots is not None and want > slots:
        raise UsageError(f"concurrency {want} exceeds the server's {slots} slot{'s' if slots != 1 else ''} "
                         f"({source}): requests beyond the slots wait in its queue, which measures the queue, not "
                         f"serving; use --concurrency {slots} or less, or a preset with more parallel slots")


def props_slots(props: Mapping[str, Any] | None) -> int | None:
    value = (props or {}).get("total_slots")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def bench_settings(plan: BenchPlan, claims: ClaimsPolicy, **values: Any) -> BenchSettings:
    """BenchSettings from a plan and overrides; a value out of range is a one-line usage error naming the field."""
    try:
        return BenchSettings.from_plan(plan, claims, **values)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "bench"
        raise UsageError(f"bench {where}: {err['msg'].removeprefix('Value error, ')}") from None


_HTTP_STATUS = re.compile(r": HTTP (\d{3})\b")


def nothing_measured(summary: BenchSummary) -> str | None:
    """Why a bench that sent requests has nothing to show (every measured request failed), or None.

    Such a run must not end "complete": a server that answered every request with HTTP 401 (it wants an API key)
    or 500 measured nothing at all.
    """
    sent = sum(c.n for c in summary.cells)
    if sent == 0 or any(c.n_ok for c in summary.cells):
        return None
    failures = [f for c in summary.cells for f in c.failures]
    codes = {m.group(1) for f in failures if (m := _HTTP_STATUS.search(f))}
    if len(codes) == 1 and len(failures) == sent and (code := codes.pop()) in ("401", "403"):
        return (f"every one of the {sent} measured requests was refused with HTTP {code} (not authorized): the "
                "server wants an API key (llama-server --api-key) and the bench sends none; bench a preset or a "
                "server without one")
    first = failures[0].split(": ", 1)[-1] if failures else "no reason recorded"
    return f"every one of the {sent} measured requests failed; nothing was measured (first: {first[:200]})"


def read_llama_bench_json(path: str | None) -> LlamaBenchResult | None:
    """`--llama-bench-json FILE` opened, read and checked now, before any server starts (exit 2 naming the file)."""
    return None if path is None else read_result(Path(path), f"--llama-bench-json {path}")


def bench_in_session(session: Session, progress: Progress, *, watch: ContentionWatch | None = None,
                     wait_quiet_s: float = 0.0, llama_bench: LlamaBenchResult | None = None,
                     **overrides: Any) -> BenchSummary:
    """Bench the session's endpoint with the pack's plan and record what blocks a claim in the session.

    The host is checked before measuring (waiting up to `wait_quiet_s` for quiet, never silently) and watched
    during it; a cell that is contended, stalled or wider than the pack's interval target makes the run
    `noisy`, a claim blocker. A tripped guard raises EngineError after the measured cells are written; the
    session then tears the endpoint down and records the run as partial.
    """
    settings = settings_for_session(session, **overrides)
    check_client_limits(settings.concurrency)
    check_slots(settings.concurrency, props_slots(session.endpoint.props), "/props total_slots")
    session.record(temperature=settings.temperature)
    own = watch is None
    w = watch or watch_for(session).start()
    try:
        w.wait_quiet(wait_quiet_s, progress)
        summary = run_bench(session.endpoint, settings, session.results, sampler=session.sampler, progress=progress,
                            watch=w, llama_bench=llama_bench)
    finally:
        if own:
            w.stop()
    session.record(blockers=claim_blockers(summary), notes=[*host_note(summary), *set_aside_notes(summary),
                                                            energy_note([c.energy for c in summary.energy], "cells")])
    if summary.observer is not None:
        session.record(notes=[f"observer cost: {summary.observer.sentence()}"])
    if failed := nothing_measured(summary):
        session.record(blockers=[f"bench: {failed}"])
        raise EngineError(f"{failed}; the run is recorded as partial in {session.results.path}")
    noisy = noisy_reason(summary, session.pack.claims)
    session.record(blockers=[noisy] if noisy else [])
    if noisy:
        progress(f"claim: ineligible ({noisy})")
    g = summary.guard_event
    if g is not None:
        raise EngineError(f"guard {g.guard} tripped ({g.observed_gib:.2f} GiB < {g.threshold_gib:g} GiB); "
                          f"server stopped, measured cells kept in {session.results.path}")
    return summary


def bench_pack(pack_ref: str | None, preset: str | None, *, out: Path | None, progress: Progress,
               server_bin: Path | None = None, model_path: Path | None = None, wait_quiet_s: float = 0.0,
               **overrides: Any) -> tuple[BenchSummary, Path]:
    """Launch the pack's server (bench preset unless given), bench it, tear it down; the receipt binds it."""
    pack = load_pack(pack_ref).pack
    plan_preset = preset or pack.bench.preset
    # Everything the command names, checked before anything starts: the settings, the llama-bench file, this
    # client's limits and the slots the preset asks for.
    check_client_limits(bench_settings(pack.bench, pack.claims, **overrides).concurrency)
    concurrency = tuple(overrides.get("concurrency") or pack.bench.concurrency)
    llama_bench = read_llama_bench_json(overrides.get("llama_bench_json"))
    if plan_preset in pack.presets and pack.engine.name == "llama.cpp":
        check_slots(concurrency, preset_slots(pack.presets[plan_preset].flags),
                    f"preset {plan_preset!r} sets parallel")
    results: Path | None = None
    try:
        with open_session(plan_run(pack_ref, plan_preset, RunOptions(
                out=out, kind="bench", progress=progress, server_bin=server_bin, model_path=model_path))) as session:
            results = session.results.path
            summary = bench_in_session(session, progress, wait_quiet_s=wait_quiet_s, llama_bench=llama_bench,
                                       **overrides)
    except BaseException:
        if results is not None:  # MEASURED.md and report.html, as `servepack run` leaves them; a partial run's too
            evidence_after(results, pack, progress)
        raise
    evidence_after(session.results.path, pack, progress, write_errors=True)
    return summary, session.results.path


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-") or "model"


def bench_attach(base_url: str, model: str, *, pack_ref: str | None, out: Path | None, progress: Progress,
                 wait_quiet_s: float = 0.0, **overrides: Any) -> tuple[BenchSummary, Path]:
    """Bench a server that is already running; host memory is sampled, the server's RSS is not known.

    The attached server's process is found by its listening port when this user may see it; otherwise its CPU
    time counts as others' and the contention summary says the engine was not identified.
    """
    if out is not None:
        check_new_out(out)  # before the server is asked anything
    if pack_ref is not None:
        pack = load_pack(pack_ref).pack
        plan, claims = pack.bench, pack.claims
    else:
        plan = BenchPlan(preset="attach", context_marks=[1024])
        claims = ClaimsPolicy(headline=Headline(metric="decode_tok_s", preset="attach", context_tokens=1024,
                                                gen_tokens=128))
    settings = bench_settings(plan, claims, **overrides)
    check_client_limits(settings.concurrency)
    llama_bench = read_llama_bench_json(settings.llama_bench_json)
    endpoint = attach(base_url, model)
    check_slots(settings.concurrency, props_slots(read_props(endpoint.base_url)), "/props total_slots")
    root = Settings.load().results_dir
    results = ResultsDir.create(out) if out else ResultsDir.new(root, f"attach-{_slug(model)}")
    port = httpx.URL(endpoint.base_url).port
    server_pid = listening_pid(port) if port else None
    if server_pid is None:
        progress("host watch: the attached server's process was not identified; its CPU time counts as others'")
    watch = ContentionWatch(ExcludeSet([os.getpid(), *([server_pid] if server_pid else [])]),
                            engine_identified=server_pid is not None)
    with MemorySampler(None, results.jsonl(MEMORY_TIMELINE), guards=settings.guards) as sampler, watch:
        watch.wait_quiet(wait_quiet_s, progress)
        summary = run_bench(endpoint, settings, results, sampler=sampler, progress=progress, watch=watch,
                            llama_bench=llama_bench)
    if failed := nothing_measured(summary):
        raise EngineError(f"{failed}; what was sent is in {results.path}")
    return summary, results.path


def llama_bench_pack(pack_ref: str | None, preset: str | None, *, out: Path | None, progress: Progress,
                     prompt_tokens: tuple[int, ...] = (), gen_tokens: tuple[int, ...] = (),
                     repetitions: int | None = None, bench_bin: Path | None = None,
                     model_path: Path | None = None) -> tuple[LlamaBenchResult, Path]:
    """llama-bench from the pack's engine, with the preset's flags mapped to llama-bench's."""
    settings = Settings.load()
    loaded = load_pack(pack_ref)
    pack = loaded.pack
    if out is not None:
        check_new_out(out)
    try:
        name, preset_obj = pack.preset(preset or pack.bench.preset)
    except KeyError as exc:
        raise UsageError(f"--preset: {exc.args[0]}") from None
    plan = pack.bench.llama_bench
    model = resolve_model(pack.model, cache_dir=settings.cache_dir, pack_dir=loaded.path.parent, model_path=model_path)
    engine = locate_binary("llama-bench", pack.engine, bench_bin)
    results = ResultsDir.create(out) if out else ResultsDir.new(settings.results_dir, pack.id, "llama-bench")
    progress(f"llama-bench {engine.path} · preset {name} · results → {results.path}")
    try:
        result = run_llama_bench(engine.path, model.path, preset_obj.flags,
                                 prompt_tokens=prompt_tokens or tuple(plan.prompt_tokens),
                                 gen_tokens=gen_tokens or tuple(plan.gen_tokens),
                                 repetitions=repetitions or plan.repetitions, batch_size=plan.batch_size)
    except LlamaBenchFailed as exc:
        if exc.partial is None:
            raise
        # what it measured before it failed is written before the error, its exit code saying it is partial
        results.write_json(LLAMA_BENCH_NAME, exc.partial)
        raise EngineError(f"{exc}; the {len(exc.partial.tests)} test(s) it finished are kept in "
                          f"{results.path / LLAMA_BENCH_NAME} (exit_code {exc.partial.exit_code}: partial)") from None
    results.write_json(LLAMA_BENCH_NAME, result)
    return result, results.path
