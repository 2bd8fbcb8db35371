"""Capacity jobs the CLI calls: sweep a pack's launched endpoint, or an attached one, to the knee; export.

A session (or an attached endpoint) plus the load measurer (`bench.sweep.run_capacity`), like `pipeline.bench`.
Exports beside capacity.json: `capacity_requests.csv` (every request), `capacity_sweep_rows.json` (one
local-ai-registry speed-sweep row per point, made by `registry.export`'s own row builder and checked against its
schema), and two SVG charts (`capacity_curve.svg`, `capacity_goodput.svg`).
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import jsonschema
from pydantic import ValidationError

from servepack.bench.capacity import Slo
from servepack.bench.carryover import carry_sentence
from servepack.bench.config import BenchSettings
from servepack.bench.load import LoadSample, LoadSettings
from servepack.bench.observer import local_pids
from servepack.bench.order import rest_line
from servepack.bench.roofline import bytes_per_token, weight_bytes
from servepack.bench.shapes import shape_for
from servepack.bench.summary import cell_summary
from servepack.bench.sweep import POINTS_NAME, REQUESTS_NAME, CapacityResult, run_capacity
from servepack.bench.sweep_points import FRESH_FAILED
from servepack.engine.attach import attach
from servepack.errors import EngineError, ModelError, ResultsWriteError, ServerDied, UsageError
from servepack.host.contention import listening_pid
from servepack.host.energy import energy_note
from servepack.host.fingerprint import gpu_bandwidth_gbs
from servepack.host.memory import MemorySampler
from servepack.packs import load_pack
from servepack.pipeline.bench import check_client_limits, preset_slots, watch_for
from servepack.pipeline.evidence import evidence_after
from servepack.plan import RunOptions, plan_run
from servepack.progress import Progress
from servepack.registry import export as registry
from servepack.registry.format.check import REGISTRY_SCHEMA_VERSION
from servepack.report.capacity import CurvePoint, goodput_svg, throughput_latency_svg
from servepack.session import MEMORY_TIMELINE, Session, open_session
from servepack.settings import Settings
from servepack.store import ResultsDir, check_new_out

CSV_NAME = "capacity_requests.csv"
ROWS_NAME = "capacity_sweep_rows.json"
CURVE_NAME = "capacity_curve.svg"
GOODPUT_NAME = "capacity_goodput.svg"
CSV_FIELDS = ("point", "shape", "level", "session", "turn", "stream", "nonce", "t_sent_unix", "sent_s",
              "scheduled_s", "launch_lag_ms", "lateness_ms", "in_flight", "ok", "failure", "fresh", "fresh_reason",
              "warm", "cache_n",
              "endpoint_prompt_tokens", "server_prompt_tokens", "gen_tokens_requested", "generated_tokens",
              "ttft_ms", "e2e_ms", "tpot_ms", "itl_ms_median", "itl_ms_p90", "prompt_per_ttft_tok_s_client",
              "prompt_eval_tok_s_server", "decode_tok_s_client", "decode_tok_s_server", "http_status", "dropped",
              "stalled", "short_output")


def load_settings(**values: Any) -> LoadSettings:
    """LoadSettings from flags; a value out of range is a one-line usage error naming the flag."""
    try:
        return LoadSettings(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UsageError(f"capacity{' ' + where if where else ''}: {err['msg'].removeprefix('Value error, ')}") \
            from None


def read_samples(results: ResultsDir) -> list[LoadSample]:
    path = results.file(REQUESTS_NAME)
    if not path.is_file():
        return []
    return [LoadSample.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def csv_text(samples: Sequence[LoadSample]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_FIELDS), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for s in samples:
        w.writerow({k: ("" if v is None else v) for k, v in s.model_dump(include=set(CSV_FIELDS)).items()})
    return buf.getvalue()


def sweep_rows(result: CapacityResult, samples: Sequence[LoadSample], gpu_gb: float | None = None
               ) -> list[dict[str, Any]]:
    """One speed-sweep row per point, built by the registry's row builder, plus the load's own columns."""
    st = result.settings
    rows = []
    for p in result.points:
        mine = [s for s in samples if s.point == p.index]
        conc = max(1, round(p.level if shape_for(st.shape).counts_streams else p.mean_concurrency))
        bench = BenchSettings(context_marks=(st.prompt_tokens,), gen_tokens=st.gen_tokens, concurrency=(conc,),
                              samples=1)
        cell = cell_summary(mine, context_tokens=st.prompt_tokens, concurrency=conc, settings=bench,
                            deferred_max=None, metrics_diff=None, stopped=p.stopped, ci=False)
        row = registry.sweep_row(cell, gpu_gb, bench.gen_tokens <= bench.noise_floor_gen_tokens)
        row.update({"load_shape": st.shape, "load_level": p.level, "load_unit": result.level_unit,
                    "arrival_rate_rps": p.rate_achieved, "goodput_rps": round(p.goodput_rps, 4),
                    "meets_slos": p.passed, "output_tok_s_wall": p.throughput.output_tok_s_wall,
                    "decode_tok_s_concurrent": p.throughput.decode_tok_s_concurrent,
                    "warm": shape_for(st.shape).warm})
        rows.append(row)
    check = registry.schema("speed_sweep")["properties"]["rows"]
    if rows:
        jsonschema.validate(rows, check)
    return rows


def write_exports(results: ResultsDir, result: CapacityResult) -> list[str]:
    """The CSV, the registry rows and the charts; returns the names written."""
    samples = read_samples(results)
    results.write_text(CSV_NAME, csv_text(samples))
    rows = sweep_rows(result, samples)
    results.write_json(ROWS_NAME, {"schema_version": REGISTRY_SCHEMA_VERSION, "rows": rows})
    names = [CSV_NAME, ROWS_NAME]
    pts = [CurvePoint(level=p.level, output_tok_s=p.throughput.output_tok_s_wall, ttft_ms_p90=p.ttft_ms_p90,
                      goodput_rps=p.goodput_rps, requests_s=p.requests_s, passed=p.passed)
           for p in result.points if p.stopped is None and p.repeat_of is None]
    if pts:
        ttft = next((s.bound for s in result.slos if s.metric == "ttft"), None)
        results.write_text(CURVE_NAME, throughput_latency_svg(pts, ttft_bound_ms=ttft, unit=result.level_unit,
                                                              knee=result.knee.level))
        results.write_text(GOODPUT_NAME, goodput_svg(pts, unit=result.level_unit, best=result.best_level))
        names += [CURVE_NAME, GOODPUT_NAME]
    return names


def result_lines(r: CapacityResult) -> list[str]:
    """What the receipt's notes say about a sweep: the answer, the knee, the limit, the observer cost."""
    lines = [f"capacity ({r.settings.shape}, {', '.join(s.describe() for s in r.slos)}): "
             + (f"highest level meeting every SLO {r.best_level:g} {r.level_unit}, goodput {r.goodput_rps:.2f} "
                f"req/s" if r.best_level is not None and r.goodput_rps is not None else "no level met every SLO")
             + f"; {len(r.points)} points in {r.wall_s:.0f} s",
             f"capacity knee: {r.knee.level:g} {r.level_unit} ({r.knee.reason})" if r.knee.level is not None
             else f"capacity knee: not found ({r.knee.reason})",
             f"capacity saturation: {r.saturation.level:g} {r.level_unit} ({r.saturation.reason})"
             if r.saturation.level is not None else f"capacity saturation: not found ({r.saturation.reason})",
             f"capacity limit: {r.limit.name} ({r.limit.reason})",
             ("client-limited points (launch lag p99 over " f"{r.client_lag_bound_ms:g} ms, or arrivals dropped): "
              + ", ".join(f"{lv:g}" for lv in r.client_limited_levels) + f" {r.level_unit}; never the best level "
              "or the knee") if r.client_limited_levels else
             f"client kept up at every point (launch lag p99 ≤ {r.client_lag_bound_ms:g} ms)",
             f"observer cost: {r.observer.sentence()}",
             f"capacity figures: {r.figures}",
             energy_note([p.energy for p in r.energy], "points"),
             rest_line([p.rest for p in r.points]),
             carry_sentence(r.carry_over),
             *r.independence.lines(r.level_unit)]
    return lines


def order_refusal(r: CapacityResult, *, launched: bool) -> str | None:
    """The one line a sweep found order-dependent ends with (exit 1), naming what to do; None otherwise."""
    if not r.independence.order_dependent:
        return None
    fix = ("measure it again with --fresh-server-per-point (each point on a fresh server, its start outside the "
           "point's timing)" if launched and not r.fresh_server else
           "restart the server between points, or run servepack capacity with its pack and "
           "--fresh-server-per-point" if not launched else
           "even with a fresh server per point the repeats moved: the host or the device changed during the sweep")
    return f"capacity: order-dependent sweep, no knee claimed ({r.independence.reason}); {fix}"


def bandwidth_facts(session: Session) -> dict[str, Any]:
    """The weight bytes a decode step reads (from the model's GGUF header) and the GPU's published peak bandwidth,
    where known: what a point's achieved bandwidth is taken from."""
    out: dict[str, Any] = {}
    header = session.plan.gguf  # the model's header as the plan read it, once (None: no file, or unreadable)
    if header is not None:
        try:
            out["weight_bytes_per_token"], out["weight_bytes"] = bytes_per_token(header)[0], weight_bytes(header)
        except ModelError:
            pass
    if session.host.gpus:
        name = session.host.gpus[0].name
        if (bw := gpu_bandwidth_gbs(name)) is not None:
            out["peak_gbs"], out["peak_source"] = bw, f"published peak of {name}"
    return out


def process_argv(pid: int) -> list[str] | None:
    """The argv of a process on this host (/proc/<pid>/cmdline), or None where it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    parts = [p.decode(errors="replace") for p in raw.split(b"\0") if p]
    return parts or None


def _bounds(settings: LoadSettings, max_level: float) -> None:
    if shape_for(settings.shape).counts_streams:
        if max_level != int(max_level) or max_level < 1:
            raise UsageError(f"--max-concurrency {max_level:g}: a whole number of streams ≥ 1")
        check_client_limits([int(max_level)], "--max-concurrency")


def capacity_pack(pack_ref: str | None, preset: str | None, *, settings: LoadSettings, slos: Sequence[Slo],
                  max_level: float, out: Path | None, progress: Progress, start_level: float | None = None,
                  rel_step: float = 0.1, server_bin: Path | None = None,
                  model_path: Path | None = None, fresh_server: bool = False) -> tuple[CapacityResult, Path]:
    """Launch the pack's server (preset `parallel4` when the pack has one, else its bench preset), sweep, export;
    MEASURED.md and report.html follow, as `servepack run` leaves them (a partial sweep's too)."""
    _bounds(settings, max_level)
    pack = load_pack(pack_ref).pack
    chosen = preset or ("parallel4" if "parallel4" in pack.presets else pack.bench.preset)
    slots = preset_slots(pack.presets[chosen].flags) if chosen in pack.presets else None
    results: Path | None = None
    try:
        with open_session(plan_run(pack_ref, chosen, RunOptions(
                out=out, kind="capacity", progress=progress, server_bin=server_bin, model_path=model_path))) as session:
            results = session.results.path
            result = _sweep(session, settings, slos, max_level=max_level, start_level=start_level,
                            rel_step=rel_step, slots=slots, chosen=chosen, progress=progress,
                            fresh_server=fresh_server)
    except BaseException:
        if results is not None:  # a partial sweep's evidence too; a failure to write it is said, not raised over
            evidence_after(results, pack, progress)
        raise
    evidence_after(session.results.path, pack, progress, write_errors=True)
    return result, session.results.path


def _sweep(session: Session, settings: LoadSettings, slos: Sequence[Slo], *, max_level: float,
           start_level: float | None, rel_step: float, slots: int | None, chosen: str,
           progress: Progress, fresh_server: bool = False) -> CapacityResult:
    """The sweep in an open session, its exports and what the receipt records of it."""
    session.record(temperature=settings.temperature)
    watch = watch_for(session).start()
    t0_unix = time.time()
    try:
        result = run_capacity(session.endpoint, settings, slos, session.results, max_level=max_level,
                              start_level=start_level, rel_step=rel_step, slots=slots,
                              slots_source=f"preset {chosen!r} sets parallel" if slots else None,
                              server_pids=local_pids(session.endpoint), sampler=session.sampler,
                              progress=progress, fresh_server=fresh_server,
                              on_restart=lambda e: session.sampler.set_pid(e.pid), **bandwidth_facts(session))
    except ServerDied as exc:
        if not str(exc).startswith(FRESH_FAILED):
            raise
        raise ServerDied(f"capacity sweep stopped: the {exc}; finished points kept in {session.results.path} "
                         "(capacity.json: partial): fix what the server's log shows, then run again") from None
    except ResultsWriteError as exc:  # the disk filled (or went read-only) under a point: what is kept, and the fix
        points = session.results.file(POINTS_NAME)
        n = len(points.read_text().splitlines()) if points.is_file() else 0
        err = ResultsWriteError(f"{exc} ({n} finished point{'' if n == 1 else 's'} in {POINTS_NAME}; capacity.json "
                                "not written): make room there or choose another --out, then run again")
        err.reason = exc.reason
        raise err from None
    except KeyboardInterrupt:
        saved = session.results.file("capacity.json")
        why = CapacityResult.model_validate_json(saved.read_text()).stopped_reason if saved.is_file() else None
        progress(f"capacity {why or 'interrupted (Ctrl-C)'}; finished points kept in {session.results.path}"
                 + (" (capacity.json: partial)" if saved.is_file() else ""))
        raise
    finally:
        host = watch.phase("capacity", t0_unix)
        watch.stop()
        if host.contended:
            # Figures taken while others held the CPU say little about this server: never a claim's.
            session.record(notes=[f"capacity host: contended ({host.reason})"],
                           blockers=[f"capacity: the host was contended during the sweep ({host.reason})"])
            progress(f"host contended during the sweep: {host.reason}")
        if session.results.file("capacity.json").is_file():
            done = CapacityResult.model_validate_json(session.results.file("capacity.json").read_text())
            write_exports(session.results, done)
            session.record(notes=result_lines(done))
            if done.independence.order_dependent:
                session.record(blockers=[f"capacity: order-dependent sweep ({done.independence.reason})"])
            elif not done.claim_grade:
                session.record(blockers=[f"capacity: {done.figures}" if shape_for(done.settings.shape).warm
                                         else "capacity: not every figure fresh and complete"])
    if result.status == "partial":
        raise EngineError(f"capacity sweep stopped: {result.stopped_reason}; finished points kept in "
                          f"{session.results.path}")
    return result


def capacity_attach(base_url: str, model: str, *, settings: LoadSettings, slos: Sequence[Slo], max_level: float,
                    out: Path | None, progress: Progress, start_level: float | None = None,
                    rel_step: float = 0.1, slots: int | None = None) -> tuple[CapacityResult, Path]:
    """Sweep a server that is already running on loopback; its process is found by its port when visible."""
    _bounds(settings, max_level)
    if out is not None:
        check_new_out(out)  # before the server is asked anything
    endpoint = attach(base_url, model)
    results = ResultsDir.create(out) if out else ResultsDir.new(Settings.load().results_dir, "attach", "capacity")
    port = httpx.URL(endpoint.base_url).port
    pid = listening_pid(port) if port else None
    if pid is None:
        progress("observer cost: the attached server's process was not identified; its CPU time is unknown")
    argv = process_argv(pid) if pid else None
    with MemorySampler(None, results.jsonl(MEMORY_TIMELINE)) as sampler:
        try:
            result = run_capacity(endpoint, settings, slos, results, max_level=max_level, start_level=start_level,
                                  rel_step=rel_step, slots=slots, slots_source="--slots" if slots else None,
                                  server_pids=[pid] if pid else [], sampler=sampler, progress=progress,
                                  server_argv=argv)
        finally:
            if results.file("capacity.json").is_file():
                write_exports(results, CapacityResult.model_validate_json(results.file("capacity.json").read_text()))
    if result.status == "partial":
        raise EngineError(f"capacity sweep stopped: {result.stopped_reason}; finished points kept in {results.path}")
    return result, results.path
