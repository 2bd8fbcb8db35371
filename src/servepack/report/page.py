"""The HTML report: one self-contained page rendered from the evidence view model, never from anything else.

No script, no external resource: styles are inline, charts are inline SVG, and a Content-Security-Policy forbids
every fetch, so the page shows the same thing offline, printed, or years later. Every string from a record is
escaped (`markup.esc`), and charts get their labels as text that matplotlib escapes.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from servepack import __version__
from servepack.bench.sample import metric_label
from servepack.errors import ResultsWriteError, UsageError
from servepack.records.claims import stat_name
from servepack.records.evidence import Evidence
from servepack.records.verify import REPORT_NAME
from servepack.redact import scrub_shown
from servepack.registry.format import LoadedRecord
from servepack.report import plots
from servepack.report.context import Ctx, figure, when
from servepack.report.markup import Safe, anchor, esc, inline_md, note, num, table
from servepack.report.measured import headline_block
from servepack.report.sections import (
    candidates,
    capacity,
    concurrency,
    distribution,
    energy,
    memory,
    provenance,
    registry,
    roofline,
    smoke,
    speed,
)
from servepack.report.sources import Group, Source, load_source
from servepack.report.style import CSP, STYLE
from servepack.safepath import open_regular, replace_bytes
from servepack.store import rfc3339, scrubbed_text, utc_now, write_problem


def _section(ctx: Ctx, key: str, title: str, body: Callable[[Ctx], str]) -> str:
    """A numbered section; one that fails to draw says so in place, and the rest of the page still renders."""
    try:
        inner = body(ctx)
    except Exception as exc:  # a view degrades to a note: never a blank page for one bad file
        last = traceback.extract_tb(exc.__traceback__)[-1]
        why = scrub_shown(f"{type(exc).__name__}: {exc}")  # the message holds no secret, as on the terminal
        inner = note(f"this section could not be drawn: {why} ({Path(last.filename).name}:{last.lineno})", "error")
    return f'<section class="part" id="{ctx.id(key)}"><h3>{esc(title)}</h3>{inner}</section>'


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
    unit = metric_label(h.metric, h.source)
    if choice.stat is None or choice.stat.median is None:
        value = "<span class='headline-value none'>no headline</span>"
    else:
        value = (f"<span class='headline-value' data-metric='{esc(stat_name(h.metric, h.source))}'>"
                 f"{esc(num(choice.stat.median))}</span> <span class='unit'>{esc(unit)}</span>")
    block = inline_md(headline_block(choice, ev.pack))
    return f"<div class='headline'><div class='big'>{value}</div><p>{block}</p></div>"


SECTIONS: list[tuple[str, str, Callable[[Ctx], str]]] = [
    ("speed", "1 · Speed by context mark", speed.section),
    ("dist", "2 · TTFT and inter-token latency", distribution.section),
    ("conc", "3 · Concurrency", concurrency.section),
    ("memory", "4 · Memory timeline", memory.section),
    ("roofline", "5 · Roofline", roofline.section),
    ("smoke", "6 · Smoke suites", smoke.section),
    ("candidates", "7 · Candidates", candidates.section),
    ("registry", "8 · Registry records", registry.section),
    ("capacity", "9 · Capacity", capacity.section),
    ("energy", "10 · Energy", energy.section),
    ("provenance", "11 · Provenance and receipts", provenance.section),
]


def group_html(group: Group, gi: int, source: Source, records: Sequence[LoadedRecord], legend: plots.Legend) -> str:
    ev = group.evidence
    ctx = Ctx(group, gi, records, legend)
    what = (f"run {group.focus[0].path.name}" if group.single_run
            else f"{len(ev.runs)} run(s) of this pack: tip and history")
    tip = group.focus[-1]
    head = (f"<h2>{esc(ev.pack.id)}</h2><p class='sub'>{esc(what)} · <code>{esc(source.path)}</code> · "
            f"{esc(tip.receipt.hardware.attributed_id)} · {esc(when(tip.when))}</p>")
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
                     f"{metric_label(h.metric, h.source)} @ {h.context_tokens:,} × {h.gen_tokens}",
                     g.focus[-1].receipt.hardware.attributed_id, g.focus[-1].receipt.status])
        ctx = Ctx(g, i, (), legend)
        series += [replace(x, panel=0) for x in speed.speed_series(ctx.rows(), legend, prefix=f"{label}: ")
                   if x.panel == 1 and not x.dashed]
    parts = ["<section class='overview'><h2>Side by side</h2>",
             table(["input", "pack", "runs", "headline", "headline figure", "hardware", "tip status"], body,
                   numeric=(2, 3))]
    if series:
        svg = plots.line_panels(series, ["Decode (server) by context mark"], ["generated tok/s"],
                                "prompt tokens (context mark)", name="overview-speed", title="decode side by side",
                                logx=True)
        parts.append(figure(svg, "Each input's binding settings; medians with 95% intervals."))
    return "".join(parts) + "</section>"


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
    """Atomic: a reader never sees half a page, and a write that fails leaves the earlier page and no temp file;
    a derived file, so re-rendering may replace it. A page to be read: 0644."""
    return replace_bytes(path, scrubbed_text(text).encode(), mode=0o644)


REPORT_HEAD_BYTES = 4096  # the page's generator meta is in its first few hundred bytes


def _check_out(out: Path) -> None:
    if out.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--out {out}: the report is an HTML file; name it *.html")
    if out.is_dir() or out.is_symlink():
        raise UsageError(f"--out {out}: is a directory or a symlink; give a new or an earlier report's file path")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: folder {out.parent} does not exist")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: folder {out.parent} is not writable here (permission denied or a read-only "
                         "filesystem); choose another --out or fix its permissions")
    if (out.parent / "receipt.json").is_file() and out.name != REPORT_NAME:
        raise UsageError(f"--out {out}: inside a results directory the report must be named {REPORT_NAME} "
                         "(any other file there would fail `servepack verify`)")
    if out.exists() and not _is_report(out):
        raise UsageError(f"--out {out}: exists and is not a page servepack wrote, so it is kept; remove it or "
                         "choose another --out")


def _is_report(path: Path) -> bool:
    """Whether `path` is a page servepack wrote (its generator meta in the head), the only file --out replaces. A
    FIFO, a device or a folder is refused by the reader (it never blocks, never reads a device)."""
    with open_regular(path, "give a new or an earlier report's file path", label=f"--out {path}") as fh:
        head = fh.read(REPORT_HEAD_BYTES)
    return b"<meta name='generator' content='servepack " in head


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
    page = render_report(sources, records)
    try:
        return write_html(target, page)
    except OSError as exc:  # the folder was writable a moment ago: the disk filled, or it changed under us
        if isinstance(exc, ResultsWriteError):
            raise
        raise ResultsWriteError(f"cannot write {target} ({write_problem(exc)}); nothing else was changed") from None


def write_run_report(run_dir: Path) -> Path:
    """`report.html` in a results directory, as `servepack run` leaves it."""
    return write_html(run_dir / REPORT_NAME, render_report([load_source(run_dir)]))

