"""The HTML report: one self-contained page rendered from the evidence view model, never from anything else.

No script, no external resource: styles are inline, charts are inline SVG, and a Content-Security-Policy forbids
every fetch, so the page shows the same thing offline, printed, or years later. Every string from a record is
escaped (`markup.esc`), and charts get their labels as text that matplotlib escapes.
"""

from __future__ import annotations

import json
import os
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from servepack import __version__
from servepack.bench.stats import quantile
from servepack.bench.summary import Cell
from servepack.errors import ServepackError, UsageError
from servepack.records.claims import RunView, cell_stat, stat_name
from servepack.records.compare import RecordComparison, compare_run_to_record
from servepack.records.evidence import Drift, Evidence, SettingRow
from servepack.records.measured import engine_line, headline_block, host_line, serve_line, weights_line
from servepack.records.registry import LoadedRecord, summary
from servepack.records.verify import REPORT_NAME, read_result_bytes, verify_run
from servepack.report import plots
from servepack.report.markup import Safe, anchor, esc, inline_md, note, num, pretty_json, table
from servepack.report.sources import Group, Source, load_source
from servepack.smoke.result import SuiteResult, wilson95
from servepack.store import rfc3339, utc_now

GIB = 1 << 30
# The label MEASURED.md gives a noise-floor row (records.measured.setting_row), word for word.
NOISE_FLOOR = "noise floor — shown, never a headline"
METRIC_LABEL = {"decode_tok_s": "decode tok/s", "prefill_tok_s": "prefill tok/s", "ttft_ms": "TTFT ms"}
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
MAX_JSON_CHARS = 6000  # per request or response of a failing smoke case
TOOLS_SHOWN_CHARS = 600
MAX_FAILING_SHOWN = 60
MAX_TIMELINE_POINTS = 1500


@dataclass
class Ctx:
    """What the sections of one group share: the evidence, the runs in focus, the style of each label."""

    group: Group
    gi: int
    records: Sequence[LoadedRecord]
    legend: plots.Legend

    @property
    def ev(self) -> Evidence:
        return self.group.evidence

    @property
    def src(self) -> str:
        return self.ev.pack.claims.headline.source

    def rows(self) -> list[SettingRow]:
        """Bench settings drawn: the run's own (a run DIR), else the binding ones (a results folder)."""
        if self.group.single_run:
            focus = {r.path for r in self.group.focus}
            return [r for r in self.ev.settings if r.run.path in focus]
        return self.ev.current_settings

    def id(self, *parts: object) -> str:
        return anchor(f"g{self.gi}", *parts)


def _when(ts: str) -> str:
    return ts[:16].replace("T", " ") + " UTC"


def _ci(low: float | None, high: float | None, digits: int = 2) -> str:
    return "—" if low is None or high is None else f"{num(low, digits)}–{num(high, digits)}"


def _mci(median: float | None, low: float | None, high: float | None, digits: int = 2) -> Safe:
    """A median with its 95% interval under it, small."""
    ci = "" if low is None or high is None else f"<span class='ci'>{esc(_ci(low, high, digits))}</span>"
    return Safe(f"{esc(num(median, digits))}{ci}")


def _row_label(row: SettingRow, with_run: bool = False) -> str:
    preset, gen, conc = row.key
    out = f"{preset} · {gen} gen" + (f" · c{conc}" if conc != 1 else "")
    if row.noise_floor:
        out += " (noise floor)"
    return out + (f" · {row.run.path.name}" if with_run else "")


def _section(ctx: Ctx, key: str, title: str, body: Callable[[Ctx], str]) -> str:
    """A numbered section; one that fails to draw says so in place, and the rest of the page still renders."""
    try:
        inner = body(ctx)
    except Exception as exc:  # a view degrades to a note: never a blank page for one bad file
        last = traceback.extract_tb(exc.__traceback__)[-1]
        inner = note(f"this section could not be drawn: {type(exc).__name__}: {exc} "
                     f"({Path(last.filename).name}:{last.lineno})", "error")
    return f'<section class="part" id="{ctx.id(key)}"><h3>{esc(title)}</h3>{inner}</section>'


def _figure(svg: str, caption: str) -> str:
    return f'<figure class="chart">{svg}<figcaption>{esc(caption)}</figcaption></figure>'


# 1. speed by context mark


def speed_series(rows: Sequence[SettingRow], legend: plots.Legend, prefix: str = "") -> list[plots.Series]:
    out = []
    for row in sorted(rows, key=lambda r: (str(r.key[0]), r.key[2], r.key[1])):
        label = prefix + _row_label(row)
        for panel, metric in enumerate(("prefill_tok_s", "decode_tok_s")):
            for source in ("client", "server"):  # the server's drawn last, on top
                pts = []
                for c in row.cells:
                    st = cell_stat(c, metric, source)
                    if st.median is None:
                        continue
                    tip = (f"{label} · {c.context_tokens:,} prompt tokens · {METRIC_LABEL[metric]} ({source}): "
                           f"median {num(st.median)}, 95% CI {_ci(st.ci95_low, st.ci95_high)}, n={st.n}")
                    pts.append(plots.Point(c.context_tokens, st.median, st.ci95_low, st.ci95_high, tip=tip))
                if pts:
                    out.append(plots.Series(f"{label} · {source}", pts, panel=panel, style=legend(label),
                                            dashed=source == "client"))
    return out


def _speed_table(rows: Sequence[SettingRow], ev: Evidence, *, caption: str, with_run: bool = True) -> str:
    body = []
    for row in sorted(rows, key=lambda r: (str(r.key[0]), r.key[1], r.key[2], r.run.when)):
        newer = row.superseded_by.path.name if row.superseded_by else "?"
        status = (f"not claim-grade ({row.noisy}): shown, never binding" if row.noisy else
                  "binds (tip of its kind)" if row.binds else f"historical (superseded by {newer})")
        label = esc(_row_label(row)) + (f"<span class='ci'>{esc(NOISE_FLOOR)}</span>" if row.noise_floor else "")
        for c in row.cells:
            vals: list[object] = [Safe(label), f"{c.context_tokens:,}"]
            for metric in ("prefill_tok_s", "decode_tok_s"):
                for source in ("client", "server"):
                    st = cell_stat(c, metric, source)
                    vals.append(_mci(st.median, st.ci95_low, st.ci95_high))
            vals += [_mci(c.ttft_ms.median, c.ttft_ms.ci95_low, c.ttft_ms.ci95_high, 1), f"{c.n_fresh}/{c.n}"]
            vals += [row.run.path.name, status] if with_run else []
            body.append(vals)
    head = ["setting", "prompt tokens", "prefill client", "prefill server", "decode client", "decode server",
            "TTFT ms", "fresh/n", *(["run", "status"] if with_run else [])]
    return table(head, body, numeric=(1, 2, 3, 4, 5, 6, 7), caption=caption)


def speed_section(ctx: Ctx) -> str:
    rows = ctx.rows()
    parts = []
    if not rows:
        parts.append(note("no bench summary in these runs: nothing was measured (see the receipts below)"))
    else:
        series = speed_series(rows, ctx.legend)
        if series:
            svg = plots.line_panels(series, ["Prefill", "Decode"], ["prompt tok/s", "generated tok/s"],
                                    "prompt tokens (context mark)", name=ctx.id("speed"),
                                    title="speed by context mark", logx=True)
            parts.append(_figure(svg, "Medians with their 95% bootstrap intervals; solid line and dot: the server's "
                                      "own timings; dashed line and ring: what the client observed. Hover a point for "
                                      "its figures."))
        else:
            parts.append(note("the bench recorded no successful sample: no speed to draw"))
        parts.append(_speed_table(rows, ctx.ev, caption="medians in tok/s (TTFT in ms), 95% bootstrap interval "
                                  "under each",
                                  with_run=not ctx.group.single_run))
    old = ctx.ev.historical_settings if not ctx.group.single_run else []
    if old:
        parts.append(f"<details><summary>Historical only: {len(old)} older setting(s) of the same kind "
                     "(they never bind)</summary>" + _speed_table(old, ctx.ev, caption="historical") + "</details>")
    focus = {r.run.path for r in rows}
    noisy = [r for r in ctx.ev.noisy_settings if r.run.path not in focus] if not ctx.group.single_run else []
    if noisy:
        target = ctx.ev.pack.claims.interval_target_pct
        parts.append(f"<details open><summary>Not claim-grade: {len(noisy)} setting(s) measured on a busy host, "
                     "with stalls or with an interval wider than the "
                     + (f"±{target:g}% " if target is not None else "") + "target (labelled, never binding)"
                     "</summary>" + _speed_table(noisy, ctx.ev, caption="not claim-grade") + "</details>")
    drift = [d for d in ctx.ev.drift if not ctx.group.single_run or d.new.path in focus]
    if drift:
        parts.append("<h3>Stability</h3><p>Runs of one setting on the same pins and host that differ by more "
                     "than the 95% interval:</p><ul>"
                     + "".join(f"<li>{esc(_drift_text(d))}</li>" for d in drift) + "</ul>")
    return "".join(parts)


def _drift_text(d: Drift) -> str:
    preset, gen, conc = d.key
    return (f"{preset} ctx {d.context_tokens:,} × c{conc} @ {gen} gen: {d.metric} {d.new_median:,.2f} in "
            f"{d.new.path.name} vs {d.previous_median:,.2f} in {d.previous.path.name} ({d.change_pct:+.1f}%; "
            f"outside the {d.interval_of} run's 95% interval {d.interval[0]:,.2f}–{d.interval[1]:,.2f}). "
            f"Likely cause: {'; '.join(d.causes)}.")


# 2. distributions


def _cell_samples(run: RunView, c: Cell) -> tuple[list[float], list[float], list[float]]:
    """(fresh TTFTs, unfresh TTFTs, inter-token gaps) of one cell's measured, ok requests."""
    fresh: list[float] = []
    stale: list[float] = []
    itl: list[float] = []
    for s in run.requests:
        if (s.context_tokens, s.concurrency, s.gen_tokens_requested) != (c.context_tokens, c.concurrency,
                                                                        c.gen_tokens) or not s.ok:
            continue
        if s.ttft_ms is not None:
            (fresh if s.fresh else stale).append(s.ttft_ms)
        itl += [b - a for a, b in zip(s.chunk_ms, s.chunk_ms[1:], strict=False)]
    return fresh, stale, itl


def _q(values: list[float], q: float, digits: int = 1) -> str:
    return num(quantile(sorted(values), q), digits) if values else "—"


def distribution_section(ctx: Ctx) -> str:
    rows = ctx.rows()
    if not rows:
        return note("no bench summary: no per-request samples to draw")
    ttft: list[plots.Ecdf] = []
    itl: list[plots.Ecdf] = []
    body: list[list[object]] = []
    many = len({r.key for r in rows}) > 1
    for row in rows:
        for c in row.cells:
            fresh, stale, gaps = _cell_samples(row.run, c)
            label = f"{c.context_tokens:,} ctx" + (f" · {_row_label(row)}" if many else "")
            style = len(ttft)
            ttft.append(plots.Ecdf(label, fresh, stale, style=style))
            itl.append(plots.Ecdf(label, gaps, style=style))
            body.append([label, f"{c.n_ok}/{c.n}", f"{len(fresh)}", f"{len(stale)}", _q(fresh, 0.1),
                         _q(fresh, 0.5), _q(fresh, 0.9), len(gaps), _q(gaps, 0.1, 2), _q(gaps, 0.5, 2),
                         _q(gaps, 0.9, 2), num(max(gaps), 2) if gaps else "—"])
    parts = []
    if any(e.values or e.marked for e in ttft) or any(e.values for e in itl):
        svg = plots.ecdf_panels([("Time to first token", "ms", ttft[:8]), ("Inter-token latency", "ms", itl[:8])],
                                name=ctx.id("dist"), title="TTFT and inter-token latency distributions")
        parts.append(_figure(svg, "Empirical CDFs per cell. TTFT counts fresh samples only (no prompt token reused "
                                  "from the server's cache); unfresh ones are the crosses along the bottom."
                             + (" First 8 cells drawn; all are in the table." if len(ttft) > 8 else "")))
    else:
        parts.append(note("no successful request in these cells: no distribution to draw"))
    parts.append(table(["cell", "ok/n", "fresh", "unfresh", "TTFT p10", "TTFT p50", "TTFT p90", "gaps",
                        "ITL p10", "ITL p50", "ITL p90", "ITL max"], body, numeric=range(1, 12),
                       caption="milliseconds; TTFT over fresh samples, ITL over every inter-chunk gap"))
    return "".join(parts)


# 3. concurrency


def concurrency_section(ctx: Ctx) -> str:
    by: dict[tuple[Path, str | None, int, int], dict[int, Cell]] = {}
    labels: dict[tuple[Path, str | None, int, int], str] = {}
    for row in ctx.rows():
        for c in row.cells:
            key = (row.run.path, row.key[0], row.key[1], c.context_tokens)
            by.setdefault(key, {})[c.concurrency] = c
            labels[key] = f"{row.key[0]} · {c.context_tokens:,} ctx"
    sweeps = {k: v for k, v in by.items() if len(v) > 1}
    if not sweeps:
        return note("no concurrency sweep in these runs (every cell ran at one concurrency); set "
                    "bench.concurrency to several values to draw the throughput–latency curve", "info")
    series, body = [], []
    for key, cells in sweeps.items():
        pts = []
        for conc, c in sorted(cells.items()):
            per = cell_stat(c, "decode_tok_s", ctx.src)
            agg = c.decode_tok_s_aggregate
            body.append([labels[key], conc, _mci(per.median, per.ci95_low, per.ci95_high),
                         _mci(agg.median, agg.ci95_low, agg.ci95_high), num(c.ttft_ms.median, 1),
                         "yes" if c.deferred else "no"])
            if per.median is None or agg.median is None:
                continue
            tip = (f"{labels[key]} · concurrency {conc}: per stream {num(per.median)} tok/s, aggregate "
                   f"{num(agg.median)} tok/s")
            pts.append(plots.Point(per.median, agg.median, agg.ci95_low, agg.ci95_high, tip=tip, label=f"c{conc}"))
        if pts:
            series.append(plots.Series(labels[key], pts, style=ctx.legend(labels[key])))
    parts = []
    if series:
        svg = plots.line_panels(series, ["Throughput against per-stream speed"], ["aggregate decode tok/s"],
                                f"per-stream decode tok/s ({ctx.src})", name=ctx.id("conc"),
                                title="concurrency curve")
        parts.append(_figure(svg, "Each point is one concurrency (cN); the aggregate's 95% interval as a whisker."))
    parts.append(table(["cell", "concurrency", f"per-stream decode ({ctx.src})", "aggregate decode",
                        "TTFT ms", "server deferred"], body, numeric=(1, 2, 3, 4)))
    return "".join(parts)


# 4. memory timeline


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


def memory_section(ctx: Ctx) -> str:
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
        parts.append(_figure(svg, f"{title}: memory over the run, phases marked.{extra}"))
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


# 5. roofline


def roofline_section(ctx: Ctx) -> str:
    groups, body, missing = [], [], []
    for run in ctx.group.focus:
        if run.bench is None:
            continue
        rf = run.bench.roofline
        if rf is None:
            missing.append(f"run {run.path.name}: no roofline ({run.bench.roofline_unavailable or 'not computed'})")
            continue
        label = f"{run.preset} · {run.path.name}"
        frac = f"{rf.fraction_of_ceiling:.0%}" if rf.fraction_of_ceiling is not None else ""
        bars = [plots.Bar("bandwidth ceiling", rf.ceiling_tok_s, tip=f"ceiling {num(rf.ceiling_tok_s)} tok/s",
                          text=f"{num(rf.ceiling_tok_s, 1)}")]
        if rf.decode_tok_s is not None:
            bars.append(plots.Bar("achieved decode", rf.decode_tok_s,
                                  text=f"{num(rf.decode_tok_s, 1)} · {frac} of the ceiling",
                                  tip=f"achieved {num(rf.decode_tok_s)} tok/s ({rf.decode_source})"))
        groups.append((label, bars))
        body.append([label, rf.kind, f"{rf.bytes_per_token / 1e6:,.1f} MB", f"{rf.bandwidth_gbs:,.1f} GB/s",
                     rf.bandwidth_source, num(rf.ceiling_tok_s), num(rf.decode_tok_s),
                     rf.decode_source or "—", frac or "—"])
    parts = [note(m) for m in missing]
    if groups:
        svg = plots.grouped_hbars(groups, xlabel="decode tok/s", name=ctx.id("roof"), title="decode roofline",
                                  styles={"bandwidth ceiling": 6, "achieved decode": 0})
        note_text = ctx.group.focus[0].bench.roofline.note if ctx.group.focus[0].bench and \
            ctx.group.focus[0].bench.roofline else ""
        parts.append(_figure(svg, "Achieved decode against the memory-bandwidth ceiling (bandwidth ÷ weight bytes "
                                  f"read per token); {note_text}."))
        parts.append(table(["run", "kind", "bytes/token", "bandwidth", "bandwidth source", "ceiling tok/s",
                            "achieved tok/s", "decode source", "of ceiling"], body, numeric=(2, 3, 5, 6, 8)))
    if not parts:
        parts.append(note("no bench summary in focus: no roofline"))
    return "".join(parts)


# 6. smoke


def _suites(ctx: Ctx) -> list[tuple[RunView, str, SuiteResult, list[tuple[RunView, SuiteResult]]]]:
    if ctx.group.single_run:
        return [(run, name, s, []) for run in ctx.group.focus for name, s in run.smoke]
    return [(row.run, row.file, row.result, row.older) for row in ctx.ev.smoke]


def _shown_request(req: dict[str, object], fname: str) -> dict[str, object]:
    """The request as sent, but long tool schemas (the same in every case of a suite) by name only."""
    tools = req.get("tools")
    if not isinstance(tools, list) or len(json.dumps(tools, default=str)) <= TOOLS_SHOWN_CHARS:
        return req
    names = [str(((t.get("function") or {}) if isinstance(t, dict) else {}).get("name", "?")) for t in tools]
    return {**req, "tools": [f"{n} (schema in {fname})" for n in names]}


def _attempt_html(a: object, fname: str) -> str:
    from servepack.smoke.result import Attempt

    assert isinstance(a, Attempt)
    findings = "".join(f"<li><code>{esc(f.code)}</code> ({esc(f.layer)}"
                       f"{', lenient ok' if f.lenient_ok else ''}): {esc(f.message)}</li>" for f in a.verdict.findings)
    blocks = []
    for what, doc in (("request", _shown_request(a.request, fname)), ("response", a.response)):
        text, cut = pretty_json(doc, MAX_JSON_CHARS)
        tail = f"\n… cut at {MAX_JSON_CHARS:,} characters; the whole record is in the suite's JSON" if cut else ""
        blocks.append(f"<h5>{what}</h5><pre>{esc(text + tail)}</pre>")
    err = f"<p class='note error'>error: {esc(a.error)}</p>" if a.error else ""
    verdict = ("strict pass" if a.verdict.strict_pass else "lenient pass" if a.verdict.lenient_pass else "fail")
    return (f"<div class='attempt'><h4>{esc(a.mode)} · repeat {a.repeat_index} · {esc(verdict)} · "
            f"{a.duration_s:.2f} s</h4>{err}<ul>{findings}</ul>{''.join(blocks)}</div>")


def smoke_section(ctx: Ctx) -> str:
    suites = _suites(ctx)
    if not suites:
        skipped = [n for r in ctx.group.focus for n in r.receipt.notes if "smoke" in n.lower()]
        return note("no smoke suite in " + ("this run" if ctx.group.single_run else "these runs")
                    + (f": {'; '.join(skipped)}" if skipped else ""))
    parts = []
    for run, fname, s, older in suites:
        sid = ctx.id("smoke", s.suite, run.path.name)
        kind = "executed in the sandbox" if s.executed else "one-response: tools validated, not executed"
        parts.append(f"<h4 id='{sid}'>{esc(s.suite)} v{esc(s.suite_version)} · strict {s.strict_passed}/{s.n} · "
                     f"lenient {s.lenient_passed}/{s.n} · {s.duration_s:.2f} s</h4>")
        parts.append(f"<p class='sub'>{esc(kind)} · temperature {s.temperature:g} · repeat {s.repeat} · "
                     f"<code>{esc(run.path.name)}/{esc(fname)}</code> · runner <code>{esc(s.runner_hash[:12])}…</code>"
                     "</p>")
        groups, cat_rows = [], []
        for cat, score in sorted(s.categories.items()):
            lo, hi = score.pass_k_wilson95 or wilson95(score.strict_passed, score.n)
            llo, lhi = wilson95(score.lenient_passed, score.n)
            groups.append((cat, [
                plots.Bar("strict", 100 * score.strict_passed / score.n if score.n else 0, 100 * lo, 100 * hi,
                          tip=f"{cat}: strict {score.strict_passed}/{score.n}",
                          text=f"{score.strict_passed}/{score.n}"),
                plots.Bar("lenient", 100 * score.lenient_passed / score.n if score.n else 0, 100 * llo, 100 * lhi,
                          tip=f"{cat}: lenient {score.lenient_passed}/{score.n}",
                          text=f"{score.lenient_passed}/{score.n}"),
            ]))
            cat_rows.append([cat, score.n, f"{score.strict_passed} ({_ci(100 * lo, 100 * hi, 0)} %)",
                             f"{score.lenient_passed} ({_ci(100 * llo, 100 * lhi, 0)} %)",
                             "—" if score.flake_rate is None else f"{score.flake_rate:.0%}"])
        if groups:
            svg = plots.grouped_hbars(groups, xlabel="cases passed (%)", name=sid, title=f"smoke {s.suite}",
                                      xmax=118, styles={"strict": 0, "lenient": 5})
            parts.append(_figure(svg, "Share of cases passed per category, strict and lenient, with the Wilson 95% "
                                      "interval."))
        parts.append(table(["category", "n", "strict passed (Wilson 95%)", "lenient passed (Wilson 95%)", "flake"],
                           cat_rows, numeric=(1,)))
        if s.failure_codes:
            codes = sorted(s.failure_codes.items(), key=lambda kv: -kv[1])
            parts.append(table(["finding code", "cases"], codes, numeric=(1,), caption="verdict codes"))
        case_rows = [[c.case_id, c.category, "pass" if c.strict_pass else "FAIL",
                      "pass" if c.lenient_pass else "FAIL", " ".join(c.codes) or "—"] for c in s.cases]
        parts.append(f"<details><summary>All {len(s.cases)} cases</summary>"
                     + table(["case", "category", "strict", "lenient", "codes"], case_rows) + "</details>")
        failing = [c for c in s.cases if not c.strict_pass]
        for c in failing[:MAX_FAILING_SHOWN]:
            parts.append(f"<details class='case'><summary><span class='bad'>FAIL</span> <code>{esc(c.case_id)}</code> "
                         f"· {esc(c.category)} · {esc(' '.join(c.codes) or 'no code')}"
                         f"{' · lenient pass' if c.lenient_pass else ''}</summary>"
                         f"<p>{esc(c.rationale)}</p>{''.join(_attempt_html(a, fname) for a in c.attempts)}</details>")
        if len(failing) > MAX_FAILING_SHOWN:
            parts.append(note(f"{len(failing) - MAX_FAILING_SHOWN} more failing case(s) are in {fname}", "info"))
        if older:
            parts.append(note("older runs of this suite (historical only): " + ", ".join(
                f"{r.path.name} {x.strict_passed}/{x.n} strict, {x.duration_s:.2f} s" for r, x in older), "info"))
    return "".join(parts)


# 7. candidates


def candidates_section(ctx: Ctx) -> str:
    if not ctx.ev.candidates:
        return note("no candidates declared by the pack", "info")
    body, rows, figures = [], [], []
    for row in ctx.ev.candidates:
        c = row.candidate
        body.append([c.name, c.preset, c.baseline_preset, Safe(f"<strong class='dec {esc(row.decision)}'>"
                                                               f"{esc(row.decision)}</strong>"),
                     Safe(inline_md(row.reason))])
        for m in row.comparison.metrics if row.comparison else ():
            figures.append([c.name, m.cell, METRIC_LABEL.get(m.metric, m.metric), m.source,
                            "yes" if m.promotion else "no",
                            f"{num(m.ci.base_median)} (n={m.ci.base_n})" if m.ci else "—",
                            f"{num(m.ci.cand_median)} (n={m.ci.cand_n})" if m.ci else "—",
                            _mci(m.ci.ratio, m.ci.low, m.ci.high, 3) if m.ci else "—", m.verdict])
            if m.ci is None:
                continue
            rows.append(plots.ForestRow(
                f"{c.name} · {m.cell} · {METRIC_LABEL.get(m.metric, m.metric)} ({m.source})", m.ci.ratio, m.ci.low,
                m.ci.high, emphasis=m.promotion, verdict=m.verdict,
                tip=f"{num(m.ci.base_median)} → {num(m.ci.cand_median)} (n={m.ci.base_n}/{m.ci.cand_n})"))
    parts = []
    if rows:
        svg = plots.forest(rows, xlabel="candidate ÷ baseline (ratio of medians)", name=ctx.id("forest"),
                           title="candidates against their baselines")
        parts.append(_figure(svg, "Ratio of medians with its bootstrap 95% interval; diamonds are promotion metrics. "
                                  "Above 1 is faster for tok/s, slower for TTFT (lower is better)."))
    else:
        parts.append(note("no measured candidate/baseline pair in this history: decisions are the pack's "
                          "declarations", "info"))
    parts.append(table(["candidate", "preset", "baseline", "decision", "reason"], body))
    if figures:
        parts.append(table(["candidate", "cell", "metric", "source", "promotion metric", "baseline median",
                            "candidate median", "ratio (95% CI)", "verdict"], figures, numeric=(5, 6, 7)))
    return "".join(parts)


# 8. registry records


def registry_section(ctx: Ctx) -> str:
    if not ctx.records:
        return note("no registry record given (servepack report … --record FILE)", "info")
    runs = [r for r in ctx.group.focus if r.bench is not None]
    if not runs:
        return note("no bench summary in focus: nothing to set beside the records")
    run = runs[-1]
    parts, forest_rows = [], []
    for i, loaded in enumerate(ctx.records):
        s = summary(loaded)
        try:
            cmp: RecordComparison | None = compare_run_to_record(run.path, loaded)
        except ServepackError as exc:
            cmp = None
            parts.append(note(f"{loaded.path.name}: not comparable with run {run.path.name}: {exc}"))
        engine = s.get("engine") or {}
        parts.append(f"<h4>{esc(s.get('id'))} <span class='sub'>({esc(loaded.kind)}, {esc(loaded.path.name)})</span>"
                     "</h4>")
        facts = [["hardware", f"{s.get('hardware_id', '—')} × {s.get('hardware_count', '—')}"],
                 ["engine", f"{engine.get('name', '—')} {engine.get('version', '')}"],
                 ["model instance", s.get("model_instance_id", "—")],
                 ["captured", s.get("captured_at") or s.get("measured_at") or "—"]]
        facts += [[f"samples: {x['metric']}", ", ".join(f"{v:g}" for v in x["samples"])
                   + f" (median stated {x['median_stated']:g}{'' if x['consistent'] else ', does NOT match'})"]
                  for x in s.get("samples", [])]
        parts.append(table(["record", "value"], facts, cls="facts"))
        if cmp is None:
            continue
        parts.append("<ul class='diffs'>" + "".join(f"<li>{esc(d)}</li>" for d in cmp.differences) + "</ul>")
        body = []
        for r in cmp.rows:
            ci = r.get("ci95")
            body.append([r["metric"], f"{num(r['record_median'])} (n={r['record_n']})",
                         f"{num(r['run_median'])} (n={r['run_n']})", r["run_cell"],
                         num(r["ratio_run_over_record"], 3), _ci(ci[0], ci[1], 3) if ci else "—", r["verdict"]])
            if ci and r["ratio_run_over_record"] is not None:
                forest_rows.append(plots.ForestRow(f"{METRIC_LABEL.get(r['metric'], r['metric'])} · record {i + 1}",
                                                   r["ratio_run_over_record"], ci[0], ci[1], emphasis=True,
                                                   verdict=r["verdict"],
                                                   tip=f"record {num(r['record_median'])} → run "
                                                       f"{num(r['run_median'])}"))
        parts.append(table(["metric", "record median", f"run {run.path.name} median", "run cell", "run ÷ record",
                            "95% CI", "verdict"], body, numeric=(4, 5)))
    if forest_rows:
        svg = plots.forest(forest_rows, xlabel=f"run {run.path.name} ÷ record (ratio of medians)",
                           name=ctx.id("registry"), title="this run beside registry records")
        parts.insert(0, _figure(svg, "The run's samples against each record's stated samples: ratio of medians, "
                                     "bootstrap 95% interval. Differences in hardware, engine and model are listed "
                                     "with each record."))
    return "".join(parts)


# 9. provenance and receipts


def _verify_text(run: RunView) -> tuple[str, bool]:
    try:
        rep = verify_run(run.path)
    except ServepackError as exc:
        return f"does not verify: {exc}", False
    if rep.ok:
        return f"ok: {rep.files_checked} files, {rep.figures_checked} figures", True
    return f"{len(rep.mismatches)} mismatch(es): {rep.mismatches[0].line()}", False


def provenance_section(ctx: Ctx) -> str:
    ev = ctx.ev
    tip = ctx.group.focus[-1]
    pack = ev.pack
    lines = [host_line(tip), engine_line(tip, pack), weights_line(tip, pack), serve_line(tip)]
    pins = [f"Pack: `{pack.id}` · file `{tip.receipt.pack.path}` · sha256 `{tip.receipt.pack.sha256[:12]}…`"
            + (" · shipped" if tip.receipt.pack.shipped else ""),
            f"Pins: model sha256 `{(pack.model.sha256 or 'none')[:16]}…` · engine "
            f"`{pack.engine.commit or f'{pack.engine.package}=={pack.engine.package_version}'}`"]
    out = ["<ul class='prov'>" + "".join(f"<li>{inline_md(x)}</li>" for x in pins + lines) + "</ul>"]
    for r in ctx.group.focus:
        if r.receipt.notes:
            out.append(note(f"notes of {r.path.name}: " + "; ".join(r.receipt.notes), "info"))
    body = []
    for r in reversed(ev.runs):
        text, ok = _verify_text(r)
        claim = "claim-eligible" if r.receipt.claim.eligible else "not eligible: " + "; ".join(r.receipt.claim.reasons)
        status = r.receipt.status + (f": {r.receipt.error}" if r.receipt.error else "")
        body.append([r.path.name, r.receipt.kind, r.preset or "—", status, _when(r.when),
                     r.receipt.hardware.attributed_id,
                     "binds (tip of its kind)" if r.path in ev.binding else "historical only", claim,
                     Safe(f"<span class='{'ok' if ok else 'bad'}'>{esc(text)}</span>")])
    out.append(table(["run", "kind", "preset", "receipt status", "ended", "hardware", "binding", "claim",
                      "verify (at render time)"], body, caption="receipts, newest first"))
    return "".join(out)


def missing_notes(group: Group) -> list[str]:
    """What a partial or empty run lacks, in words: the page says so instead of leaving a gap."""
    out = []
    for r in group.focus:
        name = r.path.name
        if r.receipt.status != "complete":
            out.append(f"{name}: run {r.receipt.status}" + (f": {r.receipt.error}" if r.receipt.error else ""))
        if r.bench is None:
            out.append(f"{name}: no bench summary (server_bench.json)")
        elif r.bench.status != "complete":
            out.append(f"{name}: bench {r.bench.status}" + (f": {r.bench.stopped_reason}" if r.bench.stopped_reason
                                                             else ""))
        if not r.smoke and group.single_run:
            out.append(f"{name}: no smoke results")
        out += [f"{name}: {p}" for p in r.problems]
    if not group.single_run and not group.evidence.smoke:
        out.append("no smoke results in any run of this pack")
    return out


def input_labels(paths: Sequence[Path]) -> list[str]:
    """The shortest trailing part of each input's path that tells it from the others."""
    parts = [p.resolve().parts for p in paths]
    for n in range(1, max((len(x) for x in parts), default=1) + 1):
        labels = ["/".join(x[-n:]) for x in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in paths]


def headline_html(ev: Evidence) -> str:
    choice = ev.headline
    h = choice.headline
    unit = f"{METRIC_LABEL[h.metric]} ({'client' if h.metric == 'ttft_ms' else h.source})"
    if choice.stat is None or choice.stat.median is None:
        value = "<span class='headline-value none'>no headline</span>"
    else:
        value = (f"<span class='headline-value' data-metric='{esc(stat_name(h.metric, h.source))}'>"
                 f"{esc(num(choice.stat.median))}</span> <span class='unit'>{esc(unit)}</span>")
    block = inline_md(headline_block(choice, ev.pack))
    return f"<div class='headline'><div class='big'>{value}</div><p>{block}</p></div>"


SECTIONS: list[tuple[str, str, Callable[[Ctx], str]]] = [
    ("speed", "1 · Speed by context mark", speed_section),
    ("dist", "2 · TTFT and inter-token latency", distribution_section),
    ("conc", "3 · Concurrency", concurrency_section),
    ("memory", "4 · Memory timeline", memory_section),
    ("roofline", "5 · Roofline", roofline_section),
    ("smoke", "6 · Smoke suites", smoke_section),
    ("candidates", "7 · Candidates", candidates_section),
    ("registry", "8 · Registry records", registry_section),
    ("provenance", "9 · Provenance and receipts", provenance_section),
]


def group_html(group: Group, gi: int, source: Source, records: Sequence[LoadedRecord], legend: plots.Legend) -> str:
    ev = group.evidence
    ctx = Ctx(group, gi, records, legend)
    what = (f"run {group.focus[0].path.name}" if group.single_run
            else f"{len(ev.runs)} run(s) of this pack: tip and history")
    tip = group.focus[-1]
    head = (f"<h2>{esc(ev.pack.id)}</h2><p class='sub'>{esc(what)} · <code>{esc(source.path)}</code> · "
            f"{esc(tip.receipt.hardware.attributed_id)} · {esc(_when(tip.when))}</p>")
    missing = missing_notes(group)
    miss = ("<div class='missing'><strong>Missing or partial:</strong><ul>"
            + "".join(f"<li>{esc(m)}</li>" for m in missing) + "</ul></div>") if missing else ""
    nav = "<nav class='toc'>" + " ".join(f"<a href='#{ctx.id(k)}'>{esc(t)}</a>" for k, t, _ in SECTIONS) + "</nav>"
    body = "".join(_section(ctx, k, t, fn) for k, t, fn in SECTIONS)
    return f"<article class='group' id='{ctx.id('top')}'>{head}{headline_html(ev)}{miss}{nav}{body}</article>"


def overview_html(sources: Sequence[Source], legend: plots.Legend) -> str:
    """Several inputs side by side: one row each, and their decode speeds on one chart."""
    groups = [(s, g) for s in sources for g in s.groups]
    if len(groups) < 2:
        return ""
    names = dict(zip((id(s) for s in sources), input_labels([s.path for s in sources]), strict=True))
    body, series = [], []
    for i, (s, g) in enumerate(groups):
        label = names[id(s)] + (f" ({g.evidence.pack.id})" if len(s.groups) > 1 else "")
        ev = g.evidence
        st = ev.headline.stat
        h = ev.headline.headline
        body.append([Safe(f"<a href='#{anchor(f'g{i}', 'top')}'>{esc(label)}</a>"), ev.pack.id,
                     len(ev.runs), num(st.median) if st else "—",
                     f"{METRIC_LABEL[h.metric]} @ {h.context_tokens:,} × {h.gen_tokens}",
                     g.focus[-1].receipt.hardware.attributed_id, g.focus[-1].receipt.status])
        ctx = Ctx(g, i, (), legend)
        series += [replace(x, panel=0) for x in speed_series(ctx.rows(), legend, prefix=f"{label}: ")
                   if x.panel == 1 and not x.dashed]
    parts = ["<section class='overview'><h2>Side by side</h2>",
             table(["input", "pack", "runs", "headline", "headline figure", "hardware", "tip status"], body,
                   numeric=(2, 3))]
    if series:
        svg = plots.line_panels(series, ["Decode (server) by context mark"], ["generated tok/s"],
                                "prompt tokens (context mark)", name="overview-speed", title="decode side by side",
                                logx=True)
        parts.append(_figure(svg, "Each input's binding settings; medians with 95% intervals."))
    return "".join(parts) + "</section>"


STYLE = """
:root{--ink:#1d1d1f;--muted:#5f6368;--line:#e3e3e3;--bg:#fff;--soft:#f6f7f9;--accent:#0072B2;--bad:#b00020;--ok:#0a7d3e}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,
"DejaVu Sans",sans-serif}
main{max-width:1120px;margin:0 auto;padding:24px 28px 64px}
header.page h1{font-size:26px;margin:0 0 4px}
h2{font-size:22px;margin:36px 0 2px;border-bottom:2px solid var(--ink);padding-bottom:4px}
h3{font-size:17px;margin:30px 0 10px;color:var(--ink)}
h4{font-size:15px;margin:18px 0 4px}
h5{font-size:12px;margin:10px 0 2px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.sub{color:var(--muted);margin:2px 0 10px;font-size:13.5px}
code{font:12.5px/1.4 ui-monospace,"DejaVu Sans Mono",Menlo,monospace;background:var(--soft);padding:1px 4px;
border-radius:3px;overflow-wrap:anywhere}
pre{font:12px/1.45 ui-monospace,"DejaVu Sans Mono",Menlo,monospace;background:var(--soft);padding:10px;
border:1px solid var(--line);border-radius:4px;overflow:auto;max-height:420px;white-space:pre-wrap;
overflow-wrap:anywhere}
.headline{display:flex;gap:24px;align-items:center;background:var(--soft);border-left:5px solid var(--accent);
padding:14px 18px;margin:14px 0;border-radius:4px}
.headline .big{white-space:nowrap}
.headline-value{font-size:40px;font-weight:700;font-variant-numeric:tabular-nums;color:var(--accent)}
.headline-value.none{font-size:22px;color:var(--muted)}
.headline .unit{display:block;color:var(--muted);font-size:13px}
.headline p{margin:0;font-size:13.5px}
nav.toc{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:13px;margin:8px 0 0;padding:8px 0;
border-bottom:1px solid var(--line)}
nav.toc a{color:var(--accent);text-decoration:none}
figure.chart{margin:8px 0 6px}
figure.chart svg{width:100%;height:auto;max-width:1000px;display:block}
svg.chart text{font-family:"DejaVu Sans","Liberation Sans",Arial,Helvetica,sans-serif}
figcaption{color:var(--muted);font-size:12.5px;margin-top:2px}
.tablewrap{overflow-x:auto;margin:8px 0 12px}
table{border-collapse:collapse;font-size:12.5px;min-width:40%}
caption{caption-side:top;text-align:left;color:var(--muted);font-size:12px;padding:2px 0}
th,td{padding:4px 9px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
td:first-child{white-space:nowrap}
.ci{display:block;font-size:11px;color:var(--muted);white-space:nowrap}
th{background:var(--soft);font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.facts td:first-child{color:var(--muted);white-space:nowrap}
.note{color:var(--muted);font-style:italic;margin:6px 0}
.note.missing,.note.error{color:var(--bad)}
.missing{border:1px solid #f0c2c8;background:#fff5f6;border-radius:4px;padding:8px 14px;margin:10px 0;
font-size:13.5px}
.missing ul{margin:4px 0 0;padding-left:20px}
.bad{color:var(--bad);font-weight:600}.ok{color:var(--ok)}
.dec.PROMOTE{color:var(--ok)}.dec.DO_NOT_PROMOTE{color:var(--bad)}.dec.INCONCLUSIVE,.dec.UNTESTED{color:#9a6700}
details{margin:4px 0;border:1px solid var(--line);border-radius:4px;padding:4px 10px}
details[open]{padding-bottom:10px}
summary{cursor:pointer;font-size:13.5px}
.attempt{border-top:1px dashed var(--line);margin-top:8px}
ul.prov{padding-left:18px;font-size:13.5px}ul.prov li{margin:3px 0}
ul.diffs{font-size:13px;color:var(--muted)}
footer{margin-top:48px;color:var(--muted);font-size:12px;border-top:1px solid var(--line);padding-top:8px}
@media print{main{max-width:none;padding:0}nav.toc{display:none}figure.chart,table,.headline{break-inside:avoid}
h2{break-before:page}section.part{break-inside:auto}pre{max-height:none}}
"""


def render_report(sources: Sequence[Source], records: Sequence[LoadedRecord] = ()) -> str:
    """The whole page from loaded sources; registry records, if any, are set beside each input's run."""
    legend = plots.Legend()
    names = ", ".join(input_labels([s.path for s in sources]))
    problems = [f"{s.path}: {p}" for s in sources for p in s.problems]
    groups, gi = [], 0
    overview = overview_html(sources, legend)
    for s in sources:
        for g in s.groups:
            groups.append(group_html(g, gi, s, records, legend))
            gi += 1
    probs = ("<div class='missing'><strong>Left out:</strong><ul>" + "".join(f"<li>{esc(p)}</li>" for p in problems)
             + "</ul></div>") if problems else ""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<meta name='generator' content='servepack {esc(__version__)}'>"
        f"<title>servepack report — {esc(names)}</title><style>{STYLE}</style></head><body><main>"
        f"<header class='page'><h1>servepack report</h1><p class='sub'>{esc(names)} · rendered by servepack "
        f"{esc(__version__)} at {esc(rfc3339(utc_now()))} from the receipts; derived, regenerable with "
        f"<code>servepack report</code>. Numbers carry the hardware id they were measured on.</p></header>"
        f"{probs}{overview}{''.join(groups)}"
        "<footer>Self-contained: no script, no network. Every figure is in a table beside its chart; hover a point "
        "for its numbers. <code>servepack verify DIR</code> recomputes them from the raw files.</footer>"
        "</main></body></html>\n"
    )


def write_html(path: Path, text: str) -> Path:
    """Atomic: a reader never sees half a page; a derived file, so re-rendering may replace it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # a page to be read, like any other results file (mkstemp makes it 0600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _check_out(out: Path) -> None:
    if out.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--out {out}: the report is an HTML file; name it *.html")
    if out.is_dir() or out.is_symlink():
        raise UsageError(f"--out {out}: is a directory or a symlink; give a new or an earlier report's file path")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: folder {out.parent} does not exist")
    if (out.parent / "receipt.json").is_file() and out.name != REPORT_NAME:
        raise UsageError(f"--out {out}: inside a results directory the report must be named {REPORT_NAME} "
                         "(any other file there would fail `servepack verify`)")


def default_out(dirs: Sequence[Path]) -> Path:
    if len(dirs) != 1:
        raise UsageError("several DIRs: say where the page goes with --out FILE.html")
    return dirs[0] / REPORT_NAME


def write_report(dirs: Sequence[Path], out: Path | None = None, records: Sequence[LoadedRecord] = ()) -> Path:
    """`servepack report DIR… [--out FILE.html]`: load each DIR, render, write; returns the written path."""
    if not dirs:
        raise UsageError("give at least one run directory or results folder")
    target = out if out is not None else default_out(dirs)
    _check_out(target)
    sources = [load_source(d) for d in dirs]
    return write_html(target, render_report(sources, records))


def write_run_report(run_dir: Path) -> Path:
    """`report.html` in a results directory, as `servepack run` leaves it."""
    return write_html(run_dir / REPORT_NAME, render_report([load_source(run_dir)]))
