"""Section: joules over each bench cell's measured window and per output token, by meter, or why there are none."""

from __future__ import annotations

from servepack.report.context import Ctx
from servepack.report.markup import note, num, table
from servepack.report.measured_capacity import meter_label


def section(ctx: Ctx) -> str:
    body: list[list[object]] = []
    for row in ctx.rows():
        bench = row.run.bench
        for c in bench.energy if bench else []:
            e = c.energy
            for m in e.meters:
                if m.joules is None:
                    body.append([f"{row.run.preset} · ctx {c.context_tokens:,} × c{c.concurrency}", m.meter, "—",
                                 num(e.window_s, 1), f"{e.output_tokens:,}", "—", "—",
                                 f"unreadable: {m.unreadable}"])
                    continue
                body.append([f"{row.run.preset} · ctx {c.context_tokens:,} × c{c.concurrency}", m.meter,
                             meter_label(m), num(e.window_s, 1), f"{e.output_tokens:,}", num(m.joules, 1),
                             "—" if m.j_per_output_token is None else f"{m.j_per_output_token:.4g}",
                             row.run.path.name])
    if not body:
        benched = any(row.run.bench is not None for row in ctx.rows())
        return note("no energy recorded for these bench cells (runs from before servepack measured energy)" if benched
                    else "no bench cell in focus: joules per output token of a capacity sweep are in its section",
                    "info")
    return table(["cell", "meter", "devices", "window s", "output tokens", "J", "J/output token", "run / why not"],
                 body, numeric=(3, 4, 5, 6),
                 caption="each bench cell's measured window (warmups excluded); joules from the hardware counter, "
                         "never estimated")
