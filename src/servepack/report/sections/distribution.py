"""Section 2: TTFT and inter-token latency distributions per cell."""

from __future__ import annotations

from servepack.bench.stats import quantile
from servepack.bench.summary import Cell
from servepack.records.claims import RunView
from servepack.report import plots
from servepack.report.context import Ctx, figure, row_label
from servepack.report.markup import note, num, table


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


def section(ctx: Ctx) -> str:
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
            label = f"{c.context_tokens:,} ctx" + (f" · {row_label(row)}" if many else "")
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
        parts.append(figure(svg, "Empirical CDFs per cell. TTFT counts fresh samples only (no prompt token reused "
                                  "from the server's cache); unfresh ones are the crosses along the bottom."
                             + (" First 8 cells drawn; all are in the table." if len(ttft) > 8 else "")))
    else:
        parts.append(note("no successful request in these cells: no distribution to draw"))
    parts.append(table(["cell", "ok/n", "fresh", "unfresh", "TTFT p10", "TTFT p50", "TTFT p90", "gaps",
                        "ITL p10", "ITL p50", "ITL p90", "ITL max"], body, numeric=range(1, 12),
                       caption="milliseconds; TTFT over fresh samples, ITL over every inter-chunk gap"))
    return "".join(parts)

