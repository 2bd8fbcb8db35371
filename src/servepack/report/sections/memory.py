"""Section 4: the memory timeline of each run in focus, phases and guard crossings marked."""

from __future__ import annotations

import json
from datetime import datetime

from servepack.records.claims import RunView
from servepack.records.verify import read_result_bytes
from servepack.report import plots
from servepack.report.context import Ctx, figure
from servepack.report.markup import note, num, table

GIB = 1 << 30
MAX_TIMELINE_POINTS = 1500


def _memory_rows(run: RunView) -> tuple[list[dict[str, object]], int]:
    rows, bad = [], 0
    path = run.path / "memory.jsonl"
    for line in read_result_bytes(path).decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(doc, dict) and isinstance(doc.get("t_s"), int | float):
            rows.append(doc)
        else:
            bad += 1
    return rows, bad


def _gib(v: object) -> float | None:
    return v / GIB if isinstance(v, int | float) and not isinstance(v, bool) else None


def _unix(ts: str) -> float | None:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _phases(run: RunView, offset: float) -> list[tuple[float, float, str]]:
    """The run's phases on the sampler's clock: the bench, then each smoke suite, from their own records."""
    out = []
    if run.bench is not None:
        t0, t1 = _unix(run.bench.started_at), _unix(run.bench.ended_at)
        if t0 is not None and t1 is not None and t1 > t0:
            out.append((t0 - offset, t1 - offset, "bench"))
    for _, s in run.smoke:
        t0 = _unix(s.started_at)
        if t0 is not None:
            out.append((t0 - offset, t0 + s.duration_s - offset, f"smoke {s.suite}"))
    return out


def section(ctx: Ctx) -> str:
    parts = []
    for run in ctx.group.focus:
        title = f"run {run.path.name}"
        if "memory.jsonl" not in run.receipt.files or not (run.path / "memory.jsonl").is_file():
            parts.append(note(f"{title}: no memory.jsonl (the memory sampler did not run)"))
            continue
        rows, bad = _memory_rows(run)
        if not rows:
            parts.append(note(f"{title}: memory.jsonl has no readable sample"))
            continue
        step = max(1, -(-len(rows) // MAX_TIMELINE_POINTS))
        shown = [r for i, r in enumerate(rows) if i % step == 0 or r.get("label")]
        t = [float(r["t_s"]) for r in shown]  # type: ignore[arg-type]
        mem = run.memory_summary()
        host = [plots.Line("available RAM", t, [_gib(r.get("host_available_bytes")) for r in shown], style=2)]
        if mem is None or mem.swap_total_bytes:
            host.append(plots.Line("swap free", t, [_gib(r.get("swap_free_bytes")) for r in shown], style=1,
                                   dashed=True))
        server = [plots.Line("server RSS", t, [_gib(r.get("server_rss_bytes")) for r in shown], style=0, panel=1)]
        if any(r.get("gpu_used_bytes") is not None for r in shown):
            server.append(plots.Line("GPU memory used", t, [_gib(r.get("gpu_used_bytes")) for r in shown], style=4,
                                     panel=1))
        guards = (run.bench.settings.guards if run.bench and run.bench.settings.guards else ctx.ev.pack.bench.guards)
        hlines = []
        if guards.min_available_ram_gb is not None:
            hlines.append((0, guards.min_available_ram_gb, f"guard: RAM ≥ {guards.min_available_ram_gb:g} GiB"))
        if guards.min_free_swap_gb is not None and (mem is None or mem.swap_total_bytes):
            hlines.append((0, guards.min_free_swap_gb, f"guard: swap ≥ {guards.min_free_swap_gb:g} GiB"))
        r0 = rows[0]
        t_unix = r0.get("t_unix")
        offset = (float(t_unix) if isinstance(t_unix, int | float) else 0.0) - float(r0["t_s"])  # type: ignore[arg-type]
        vlines = [(float(r["t_s"]), str(r["label"])) for r in rows if r.get("label")]  # type: ignore[arg-type]
        spans = _phases(run, offset)
        events = [(0, e.t_unix - offset, e.observed_gib, f"{e.guard}: {e.observed_gib:.2f} GiB observed, "
                   f"threshold {e.threshold_gib:g} (after {e.label or 'start'})")
                  for e in (mem.guard_events if mem else [])]
        svg = plots.timeline([*host, *server], titles=["Host", "Server process"], hlines=hlines, vlines=vlines,
                             spans=spans, events=events, xlabel="seconds since the sampler started", ylabel="GiB",
                             name=ctx.id("mem", run.path.name), title=f"memory, {title}")
        extra = f" Every {step}th of {len(rows):,} samples plotted; the table is over all of them." if step > 1 else ""
        if bad:
            extra += f" {bad} unreadable line(s) skipped."
        parts.append(figure(svg, f"{title}: memory over the run, phases marked.{extra}"))
        if mem is not None:
            facts = [
                ["samples", f"{mem.samples:,} over {mem.duration_s:,.1f} s (every {mem.interval_s:g} s)"],
                ["peak server RSS", f"{num(_gib(mem.peak_server_rss_bytes))} GiB"],
                ["host available before load → after load",
                 f"{num(_gib(mem.host_available_before_load_bytes))} → "
                 f"{num(_gib(mem.host_available_after_load_bytes))} GiB"],
                ["lowest host available", f"{num(_gib(mem.min_available_bytes))} GiB"],
                ["swap total · lowest free",
                 f"{num(_gib(mem.swap_total_bytes))} · {num(_gib(mem.min_swap_free_bytes))} GiB"],
                ["GPU memory peak", f"{num(_gib(mem.gpu_peak_used_bytes))} GiB" if mem.gpu_peak_used_bytes
                 else f"— ({mem.gpu_unavailable_reason or 'no GPU reading'})"],
                ["marks", ", ".join(f"{v[1]} @ {v[0]:.1f} s" for v in vlines) or "—"],
                ["phases", ", ".join(f"{p[2]} {p[0]:.1f}–{p[1]:.1f} s" for p in spans) or "—"],
                ["guard crossings", "; ".join(e[3] for e in events) or "none"],
            ]
            parts.append(table(["memory", "value"], facts, cls="facts"))
    return "".join(parts) or note("no run in focus")

