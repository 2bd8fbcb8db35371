"""Section: the capacity sweep: the answer, the knee, the named limit with its figures, launch lag, J/token."""

from __future__ import annotations

from servepack.bench.carryover import carry_sentence
from servepack.bench.order import rest_line
from servepack.records.claims import RunView
from servepack.report import plots
from servepack.report.capacity import CurvePoint, goodput_svg, throughput_latency_svg
from servepack.report.context import Ctx, figure
from servepack.report.markup import Safe, esc, note, num, table
from servepack.report.measured_capacity import (
    EVIDENCE_HEAD,
    client_text,
    evidence_row,
    joules_text,
    lag_text,
    limit_figures,
    limit_text,
    point_energy,
)


def _runs(ctx: Ctx) -> list[RunView]:
    if ctx.group.single_run:
        return [r for r in ctx.group.focus if r.capacity is not None]
    return ctx.ev.capacity_runs[-1:]


def _energy_svg(ctx: Ctx, run: RunView) -> str | None:
    """J/output token against the load level, one line per meter that read."""
    r = run.capacity
    assert r is not None
    by_meter: dict[str, list[plots.Point]] = {}
    for p in r.points:
        e = point_energy(r, p.index)
        for m in e.meters if e else []:
            if m.j_per_output_token is None:
                continue
            tip = (f"{p.level:g} {r.level_unit}: {m.j_per_output_token:.4g} J/output token ({m.joules:,.1f} J over "
                   f"{e.window_s if e else 0:,.1f} s, {e.output_tokens if e else 0:,} tokens)")
            by_meter.setdefault(m.meter, []).append(plots.Point(p.level, m.j_per_output_token, tip=tip,
                                                                label="client-limited" if p.client_limited else ""))
    if not by_meter:
        return None
    series = [plots.Series(f"{meter} ({'GPU' if meter == 'nvml' else 'CPU package + DRAM'})", pts, style=i)
              for i, (meter, pts) in enumerate(sorted(by_meter.items()))]
    return plots.line_panels(series, ["Energy per output token"], ["J / output token"], f"load ({r.level_unit})",
                             name=ctx.id("cap-energy", run.path.name), title="joules per output token by load")


def _sweep(ctx: Ctx, run: RunView) -> str:
    r = run.capacity
    assert r is not None
    unit = r.level_unit
    parts = [f"<p class='sub'>{esc(r.settings.shape)} load · prompt {r.settings.prompt_tokens} + gen "
             f"{r.settings.gen_tokens} tokens · SLOs {esc(', '.join(s.describe() for s in r.slos))} · run "
             f"<code>{esc(run.path.name)}</code> · {esc(r.status)}"
             + (f": {esc(r.stopped_reason)}" if r.stopped_reason else "") + "</p>"]
    answer = (f"highest level meeting every SLO: {r.best_level:g} {unit}, goodput {r.goodput_rps:.2f} req/s"
              if r.best_level is not None and r.goodput_rps is not None else "no level met every SLO")
    if r.independence.order_dependent:
        answer = "order-dependent sweep: no knee claimed (" + answer.replace("highest", "the search's highest") + ")"
    facts: list[list[object]] = [
        ["answer", answer],
        ["knee", f"{r.knee.level:g} {unit} ({r.knee.reason})" if r.knee.level is not None
         else f"none ({r.knee.reason})"],
        ["saturation", f"{r.saturation.level:g} {unit} ({r.saturation.reason})" if r.saturation.level is not None
         else f"none ({r.saturation.reason})"],
        ["limit", Safe(f"<strong>{esc(limit_text(r.limit))}</strong>")],
        ["limit figures", "; ".join(limit_figures(r.limit)) or "—"],
        ["rule", r.limit.rule or "—"],
        ["observer cost", r.observer.sentence()],
        ["order", Safe("<br>".join(esc(x.strip()) for x in r.independence.lines(unit)))],
        ["points at rest", rest_line([p.rest for p in r.points])],
        ["state kept across requests", carry_sentence(r.carry_over)],
    ]
    parts.append(table(["capacity", "value"], facts, cls="facts"))
    pts = [CurvePoint(level=p.level, output_tok_s=p.throughput.output_tok_s_wall, ttft_ms_p90=p.ttft_ms_p90,
                      goodput_rps=p.goodput_rps, requests_s=p.requests_s, passed=p.passed)
           for p in r.points if p.stopped is None and p.repeat_of is None]
    if r.carry_over:
        parts.append(table(["setting", "value", "from", "keeps state", "effect on a sweep"],
                           [[c.name, c.value, c.source,
                             "yes" if c.keeps_state else "no" if c.keeps_state is False else "?", c.effect]
                            for c in r.carry_over], caption="server settings that keep state across requests"))
    if pts:
        ttft = next((s.bound for s in r.slos if s.metric == "ttft"), None)
        parts.append(figure(throughput_latency_svg(pts, ttft_bound_ms=ttft, unit=unit, knee=r.knee.level,
                                                   name=ctx.id("cap-curve", run.path.name)),
                            "Whole-run output tokens a second against p90 TTFT; a point that missed an SLO has its "
                            "own colour and marker."))
        goodput = goodput_svg(pts, unit=unit, best=r.best_level, name=ctx.id("cap-goodput", run.path.name))
        parts.append(figure(goodput, "Goodput and completed requests a second by load."))
    svg = _energy_svg(ctx, run)
    if svg:
        parts.append(figure(svg, "Joules per output token over each point's measured window, from the hardware "
                                 "counter named; a point the client limited is labelled."))
    else:
        parts.append(note("no joules per output token: " + (joules_text(point_energy(r, r.points[0].index))[2]
                                                           if r.points else "no point measured")))
    body = []
    for p in r.points:
        j, per, meter = joules_text(point_energy(r, p.index))
        verdict = ("PASS" if p.passed else "fail") + (f" (stopped: {p.stopped})" if p.stopped else "") \
            + (f" (repeat of point {p.repeat_of})" if p.repeat_of is not None else "")
        body.append([f"{p.level:g}", verdict, num(p.goodput_rps), num(p.throughput.output_tok_s_wall, 1),
                     num(p.ttft_ms_p90, 0), lag_text(p), client_text(p),
                     Safe(f"<span title='{esc(p.limit.reason)}'>{esc(p.limit.name)}</span>") if p.limit else "—",
                     j, per, meter])
    parts.append(table([f"level ({unit})", "SLOs", "goodput req/s", "output tok/s", "TTFT p90 ms",
                        "launch lag p50 / p99 ms", "client", "limit", "J", "J/output token", "meter"], body,
                       numeric=(0, 2, 3, 4, 5, 8, 9), caption="every point, in the order measured"))
    parts.append("<details><summary>What each point measured (the figures its limit was taken from)</summary>"
                 + table(EVIDENCE_HEAD, [evidence_row(p) for p in r.points], numeric=(0, 1, 2, 4, 5, 6))
                 + "</details>")
    return "".join(parts)


def section(ctx: Ctx) -> str:
    runs = _runs(ctx)
    if not runs:
        return note("no capacity sweep in " + ("this run" if ctx.group.single_run else "these runs")
                    + " (servepack capacity)", "info")
    return "".join(_sweep(ctx, run) for run in runs)
