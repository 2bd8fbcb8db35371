"""Section 3: the throughput–latency curve of a concurrency sweep."""

from __future__ import annotations

from pathlib import Path

from servepack.bench.summary import Cell
from servepack.records.claims import cell_stat
from servepack.report import plots
from servepack.report.context import Ctx, figure, mci
from servepack.report.markup import note, num, table


def section(ctx: Ctx) -> str:
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
            body.append([labels[key], conc, mci(per.median, per.ci95_low, per.ci95_high),
                         mci(agg.median, agg.ci95_low, agg.ci95_high), num(c.ttft_ms.median, 1),
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
        parts.append(figure(svg, "Each point is one concurrency (cN); the aggregate's 95% interval as a whisker."))
    parts.append(table(["cell", "concurrency", f"per-stream decode ({ctx.src})", "aggregate decode",
                        "TTFT ms", "server deferred"], body, numeric=(1, 2, 3, 4)))
    return "".join(parts)

