"""Section 8: the run beside registry records."""

from __future__ import annotations

from servepack.errors import ServepackError
from servepack.records.compare import RecordComparison, compare_run_to_record
from servepack.registry.format import summary
from servepack.report import plots
from servepack.report.context import METRIC_LABEL, Ctx, ci_text, figure
from servepack.report.markup import esc, note, num, table


def section(ctx: Ctx) -> str:
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
                         num(r["ratio_run_over_record"], 3), ci_text(ci[0], ci[1], 3) if ci else "—", r["verdict"]])
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
        parts.insert(0, figure(svg, "The run's samples against each record's stated samples: ratio of medians, "
                                     "bootstrap 95% interval. Differences in hardware, engine and model are listed "
                                     "with each record."))
    return "".join(parts)

