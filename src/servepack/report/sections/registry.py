"""Section 8: the run beside registry records, judged as `reproduce` and `compare RUN RECORD` judge it
(`reproduce.verdict`: the facts first, then REPRODUCED / FASTER / SLOWER / NOT_COMPARABLE per record cell and
metric)."""

from __future__ import annotations

from servepack.errors import ServepackError
from servepack.registry.format import LoadedRecord, summary
from servepack.report import plots
from servepack.report.context import METRIC_LABEL, Ctx, ci_text, figure
from servepack.report.markup import Safe, esc, note, num, table
from servepack.reproduce import DEFAULT_TOLERANCE_PCT
from servepack.reproduce.verdict import (
    Judgement,
    MetricVerdict,
    judge_run,
    record_side,
    sweep_beside,
)


def _facts(loaded: LoadedRecord) -> list[list[object]]:
    s = summary(loaded)
    engine = s.get("engine") or {}
    facts: list[list[object]] = [["hardware", f"{s.get('hardware_id', '—')} × {s.get('hardware_count', '—')}"],
                                 ["engine", f"{engine.get('name', '—')} {engine.get('version', '')}"],
                                 ["model instance", s.get("model_instance_id", "—")],
                                 ["captured", s.get("captured_at") or s.get("measured_at") or "—"]]
    facts += [[f"samples: {x['metric']}", ", ".join(f"{v:g}" for v in x["samples"])
               + f" (median stated {x['median_stated']:g}{'' if x['consistent'] else ', does NOT match'})"]
              for x in s.get("samples", [])]
    return facts


def _verdict_cell(v: MetricVerdict) -> Safe:
    return Safe(f"<span class='verdict {esc(v.verdict)}' data-cell='{esc(v.cell)}' data-metric='{esc(v.metric)}'>"
                f"{esc(v.verdict)}</span>")


def _ratio(v: MetricVerdict) -> tuple[float, float, float] | None:
    """The run's median and 95% interval over the record's median, where both are there."""
    r, s = v.record, v.run
    if r is None or s is None or not r.median or s.median is None or s.ci95_low is None or s.ci95_high is None:
        return None
    return s.median / r.median, s.ci95_low / r.median, s.ci95_high / r.median


def _judged(j: Judgement, i: int, forest_rows: list[plots.ForestRow]) -> list[str]:
    parts = ["<ul class='diffs'>" + "".join(f"<li>{esc(c.line())}</li>" for c in j.checks) + "</ul>"]
    if not j.comparable:
        parts.append(note("NOT_COMPARABLE: no metric can be claimed REPRODUCED ("
                          + "; ".join(f"{c.what} {c.state}" for c in j.checks if c.state != "same") + ")"))
    body = []
    for v in j.verdicts:
        ratio = _ratio(v)
        band = ci_text(v.band[0], v.band[1]) if v.band else "—"
        run = (f"{num(v.run.median)} (n={v.run.n}, {ci_text(v.run.ci95_low, v.run.ci95_high)})"
               if v.run is not None and v.run.median is not None else "—")
        body.append([v.cell, v.metric, f"{num(v.record.median)} (band {band})" if v.record else "—", run,
                     num(ratio[0], 3) if ratio else "—", _verdict_cell(v), v.reason])
        if ratio:
            forest_rows.append(plots.ForestRow(f"{METRIC_LABEL.get(v.metric, v.metric)} · {v.cell} · record {i + 1}",
                                               *ratio, emphasis=True, verdict=v.verdict,
                                               tip=f"record {num(v.record.median if v.record else None)} → run "
                                                   f"{num(v.run.median if v.run else None)}"))
    parts.append(table(["record cell", "metric", "record median", "run median (95% CI)", "run ÷ record", "verdict",
                        "reason"], body, numeric=(4,)))
    return parts


def section(ctx: Ctx) -> str:
    if not ctx.records:
        return note("no registry record given (servepack report … --record FILE)", "info")
    runs = [r for r in ctx.group.focus if r.bench is not None]
    if not runs:
        return note("no bench summary in focus: nothing to set beside the records")
    run = runs[-1]
    parts: list[str] = []
    forest_rows: list[plots.ForestRow] = []
    for i, loaded in enumerate(ctx.records):
        parts.append(f"<h4>{esc(loaded.id)} <span class='sub'>({esc(loaded.kind)}, {esc(loaded.path.name)})</span>"
                     "</h4>")
        parts.append(table(["record", "value"], _facts(loaded), cls="facts"))
        try:
            judged = judge_run(run, record_side(loaded, sweep_beside(loaded)))
        except ServepackError as exc:
            parts.append(note(f"{loaded.path.name}: not judged against run {run.path.name}: {exc}"))
            continue
        parts += _judged(judged, i, forest_rows)
    if forest_rows:
        svg = plots.forest(forest_rows, xlabel=f"run {run.path.name} ÷ record median",
                           name=ctx.id("registry"), title="this run beside registry records")
        parts.insert(0, figure(svg, "The run's median and its bootstrap 95% interval over each record's median, per "
                                    "record cell the run measured; the verdict is the band rule of `reproduce` (the "
                                    "record's spread joined with "
                                    f"±{DEFAULT_TOLERANCE_PCT:g}%). The facts (hardware, engine, model, launch) "
                                    "are listed with each record, before any verdict."))
    return "".join(parts)
