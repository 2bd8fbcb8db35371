"""Section 7: candidates against their baselines."""

from __future__ import annotations

from servepack.report import plots
from servepack.report.context import METRIC_LABEL, Ctx, figure, mci
from servepack.report.markup import Safe, esc, inline_md, note, num, table


def section(ctx: Ctx) -> str:
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
                            mci(m.ci.ratio, m.ci.low, m.ci.high, 3) if m.ci else "—", m.verdict])
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
        parts.append(figure(svg, "Ratio of medians with its bootstrap 95% interval; diamonds are promotion metrics. "
                                  "Above 1 is faster for tok/s, slower for TTFT (lower is better)."))
    else:
        parts.append(note("no measured candidate/baseline pair in this history: decisions are the pack's "
                          "declarations", "info"))
    parts.append(table(["candidate", "preset", "baseline", "decision", "reason"], body))
    if figures:
        parts.append(table(["candidate", "cell", "metric", "source", "promotion metric", "baseline median",
                            "candidate median", "ratio (95% CI)", "verdict"], figures, numeric=(5, 6, 7)))
    return "".join(parts)

