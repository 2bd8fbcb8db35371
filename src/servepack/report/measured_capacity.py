"""The capacity and energy parts of MEASURED.md, and the words both views use for them (the page reuses these).

Figures come straight from capacity.json and server_bench.json: launch lag p50/p99 and `client_limited` per point,
the named limit with the figures it was taken from, and joules per output token per point and per bench cell (an
absent or unreadable meter is shown with its reason, never as a number).
"""

from __future__ import annotations

from servepack.bench.capacity import PointStats
from servepack.bench.carryover import carry_sentence
from servepack.bench.limit import Limit
from servepack.bench.order import rest_line
from servepack.bench.sweep import CapacityResult
from servepack.host.energy import Energy, MeterWindow
from servepack.records.claims import RunView
from servepack.records.evidence import Evidence


def _n(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def lag_text(p: PointStats) -> str:
    """Launch lag p50 / p99 in ms, or — when the point did not measure it."""
    if p.launch_lag_p50_ms is None and p.launch_lag_p99_ms is None:
        return "—"
    return f"{_n(p.launch_lag_p50_ms, 2)} / {_n(p.launch_lag_p99_ms, 2)}"


def client_text(p: PointStats) -> str:
    if p.client_limited is None:
        return "—"
    bound = f" (p99 > {p.client_lag_bound_ms:g} ms)" if p.client_lag_bound_ms is not None else ""
    return f"client-limited{bound}" if p.client_limited else "kept up"


def limit_figures(limit: Limit) -> list[str]:
    """The figures the verdict was taken from, in words; absent meters named."""
    pct = [("GPU SM", limit.gpu_sm_pct), ("GPU memory bandwidth", limit.gpu_mem_bw_pct),
           ("server's busiest thread", limit.server_thread_pct), ("host CPU", limit.host_cpu_pct),
           ("steal", limit.host_steal_pct)]
    out = [f"{name} {v:.0f}%" for name, v in pct if v is not None]
    if limit.achieved_gbs is not None:
        out.append(f"achieved bandwidth {limit.achieved_gbs:,.0f} GB/s"
                   + (f" of {limit.peak_gbs:,.0f} GB/s peak ({limit.achieved_gbs / limit.peak_gbs:.0%})"
                      if limit.peak_gbs else ""))
    if limit.server_other_cores is not None:
        out.append(f"server's other threads {limit.server_other_cores:.2f} cores")
    if limit.launch_lag_p99_ms is not None:
        bound = f" (bound {limit.client_lag_bound_ms:g} ms)" if limit.client_lag_bound_ms is not None else ""
        out.append(f"launch lag p99 {limit.launch_lag_p99_ms:,.2f} ms{bound}")
    if limit.decode_share is not None:
        out.append(f"per-stream decode {limit.decode_share:.0%} of the lowest load's")
    if limit.mean_concurrency is not None:
        out.append(f"mean concurrency {limit.mean_concurrency:.1f}" + (f" of {limit.slots} slots" if limit.slots
                                                                        else ""))
    out += [f"absent: {a}" for a in limit.absent]
    return out


EVIDENCE_HEAD = ["level", "GPU SM", "GPU memory bandwidth", "server's busiest thread", "server cores", "host CPU",
                 "steal", "absent or unreadable"]


def evidence_row(p: PointStats) -> list[str]:
    """What the machine did during one point (the figures its limit was taken from); absent meters named."""
    ev = p.evidence
    if ev is None:
        return [f"{p.level:g}", "—", "—", "—", "—", "—", "—", "no readings taken during the point"]

    def pct(v: float | None) -> str:
        return "—" if v is None else f"{v:.0f}%"

    thread = pct(ev.server_thread_pct) + (f" ({ev.server_thread})" if ev.server_thread else "")
    notes = "; ".join(x for x in (ev.gpu_note, ev.server_note, ev.host_note) if x) or "—"
    return [f"{p.level:g}", pct(ev.gpu_sm_pct), pct(ev.gpu_mem_bw_pct), thread, _n(ev.server_cpu_cores, 2),
            pct(ev.host_cpu_pct), pct(ev.host_steal_pct), notes]


def limit_text(limit: Limit) -> str:
    return f"{limit.name}: {limit.reason}"  # the reason names the point it was taken at


def point_energy(result: CapacityResult, index: int) -> Energy | None:
    return next((e.energy for e in result.energy if e.point == index), None)


def joules_text(e: Energy | None) -> tuple[str, str, str]:
    """(J, J/output token, meter) for a window: the figure meter's, or why there is none."""
    if e is None:
        return "—", "—", "not recorded"
    m = e.figure()
    if m is None:
        why = "; ".join(f"{x.meter}: {x.unreadable}" for x in e.meters) or "no meter"
        return "—", "—", f"unreadable ({why})"
    per = "—" if m.j_per_output_token is None else f"{m.j_per_output_token:.4g}"
    return f"{m.joules:,.1f}", per, meter_label(m)


def meter_label(m: MeterWindow) -> str:
    return f"{m.meter} ({', '.join(d.device for d in m.devices)})"


def capacity_block(run: RunView) -> list[str]:
    """The newest sweep: the answer, the knee, the limit with its figures, a row per point."""
    r = run.capacity
    assert r is not None
    unit = r.level_unit
    answer = (f"**Highest level meeting every SLO: {r.best_level:g} {unit}, goodput {r.goodput_rps:.2f} req/s**"
              if r.best_level is not None and r.goodput_rps is not None else "**No level met every SLO**")
    if r.independence.order_dependent:
        answer = (f"**Order-dependent sweep: no knee claimed** (the search's highest pass was "
                  f"{'—' if r.best_level is None else f'{r.best_level:g}'} {unit})")
    knee = (f"Knee: **{r.knee.level:g} {unit}** ({r.knee.reason})" if r.knee.level is not None
            else f"Knee: none ({r.knee.reason})")
    figures = limit_figures(r.limit)
    lines = [
        f"{r.settings.shape} load, prompt {r.settings.prompt_tokens} + gen {r.settings.gen_tokens} tokens; SLOs: "
        f"{', '.join(s.describe() for s in r.slos)} · run `{run.path.name}` · {run.receipt.hardware.attributed_id}"
        + (f" · **{r.status}: {r.stopped_reason}**" if r.status != "complete" else ""),
        "",
        f"{answer}. {knee}. Saturation: "
        + (f"{r.saturation.level:g} {unit}" if r.saturation.level is not None else "none")
        + f" ({r.saturation.reason}).",
        "",
        f"Limit: **{limit_text(r.limit)}**" + (f" — {'; '.join(figures)}" if figures else ""),
        "",
        *order_lines(r),
        "| level | SLOs | goodput req/s | output tok/s | TTFT p90 ms | launch lag p50 / p99 ms | client | limit | J "
        "| J/output token | meter |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in r.points:
        j, per, meter = joules_text(point_energy(r, p.index))
        verdict = "PASS" if p.passed else "fail"
        if p.repeat_of is not None:
            verdict += f" (repeat of point {p.repeat_of})"
        if p.stopped:
            verdict += f" (stopped: {p.stopped})"
        lines.append(f"| {p.level:g} | {verdict} | {p.goodput_rps:.2f} | {_n(p.throughput.output_tok_s_wall)} | "
                     f"{_n(p.ttft_ms_p90, 0)} | {lag_text(p)} | {client_text(p)} | "
                     f"{p.limit.name if p.limit else '—'} | {j} | {per} | {meter} |")
    lines += ["", "What each point measured (the figures its limit was taken from):", "",
              "| " + " | ".join(EVIDENCE_HEAD) + " |", "|" + "---|" * len(EVIDENCE_HEAD),
              *("| " + " | ".join(evidence_row(p)) + " |" for p in r.points)]
    return lines


def order_lines(r: CapacityResult) -> list[str]:
    """Whether the answer depends on the order the points ran in, how each point found the server, and the
    server's settings that keep state across requests with what they do to a sweep."""
    out = [f"Order: {r.independence.lines(r.level_unit)[0].removeprefix('capacity order: ')}", ""]
    moves = r.independence.lines(r.level_unit)[1:]
    if moves:
        out += [f"- {m.strip()}" for m in moves] + [""]
    out += [rest_line([p.rest for p in r.points]).capitalize() + ".", ""]
    if r.carry_over:
        out += ["Server settings that keep state across requests (what each does to a sweep):", "",
                "| setting | value | from | keeps state | effect on a sweep |", "|---|---|---|---|---|",
                *(f"| {c.name} | {c.value} | {c.source} | "
                  f"{'yes' if c.keeps_state else 'no' if c.keeps_state is False else '?'} | {c.effect} |"
                  for c in r.carry_over), ""]
    else:
        out += [carry_sentence(r.carry_over).capitalize() + ".", ""]
    return out


def capacity_lines(ev: Evidence) -> list[str]:
    runs = ev.capacity_runs
    if not runs:
        return []
    out = ["## Capacity", "", *capacity_block(runs[-1]), ""]
    if len(runs) > 1:
        out += ["Older sweeps (historical only): " + ", ".join(
            f"`{r.path.name}` ({r.receipt.ended_at[:10]})" for r in reversed(runs[:-1])), ""]
    return out


def energy_lines(ev: Evidence) -> list[str]:
    """Joules per output token of each shown bench cell (binding, or noisy and labelled), by the meter that read."""
    rows = []
    for row in ev.current_settings + ev.noisy_settings:
        bench = row.run.bench
        if bench is None:
            continue
        for c in bench.energy:
            j, per, meter = joules_text(c.energy)
            label = f"`{row.run.preset}` ctx {c.context_tokens:,} × c{c.concurrency}"
            label += " (noisy)" if row.noisy else ""
            rows.append(f"| {label} | "
                        f"{c.energy.window_s:,.1f} s | {c.energy.output_tokens:,} | {j} | {per} | {meter} |")
    if not rows:
        return []
    return ["Energy of the bench cells above (measured window; joules from the hardware counter named):", "",
            "| cell | window | output tokens | J | J/output token | meter |", "|---|---|---|---|---|---|",
            *rows, ""]
