"""Section 5: achieved decode against the memory-bandwidth ceiling."""

from __future__ import annotations

from servepack.report import plots
from servepack.report.context import Ctx, figure
from servepack.report.markup import note, num, table


def section(ctx: Ctx) -> str:
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
        parts.append(figure(svg, "Achieved decode against the memory-bandwidth ceiling (bandwidth ÷ weight bytes "
                                  f"read per token); {note_text}."))
        parts.append(table(["run", "kind", "bytes/token", "bandwidth", "bandwidth source", "ceiling tok/s",
                            "achieved tok/s", "decode source", "of ceiling"], body, numeric=(2, 3, 5, 6, 8)))
    if not parts:
        parts.append(note("no bench summary in focus: no roofline"))
    return "".join(parts)

