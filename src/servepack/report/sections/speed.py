"""Section 1: speed by context mark (prefill and decode, client and server), with history, noisy settings and drift."""

from __future__ import annotations

from collections.abc import Sequence

from servepack.bench.sample import metric_label
from servepack.records.claims import cell_stat
from servepack.records.evidence import Drift, Evidence, SettingRow
from servepack.report import plots
from servepack.report.context import NOISE_FLOOR, Ctx, ci_text, figure, mci, row_label
from servepack.report.markup import Safe, esc, note, num, table


def speed_series(rows: Sequence[SettingRow], legend: plots.Legend, prefix: str = "") -> list[plots.Series]:
    out = []
    for row in sorted(rows, key=lambda r: (str(r.key[0]), r.key[2], r.key[1])):
        label = prefix + row_label(row)
        for panel, metric in enumerate(("prefill_tok_s", "decode_tok_s")):
            for source in ("client", "server"):  # the server's drawn last, on top
                pts = []
                for c in row.cells:
                    st = cell_stat(c, metric, source)
                    if st.median is None:
                        continue
                    tip = (f"{label} · {c.context_tokens:,} prompt tokens · {metric_label(metric, source)}: "
                           f"median {num(st.median)}, 95% CI {ci_text(st.ci95_low, st.ci95_high)}, n={st.n}")
                    pts.append(plots.Point(c.context_tokens, st.median, st.ci95_low, st.ci95_high, tip=tip))
                if pts:
                    out.append(plots.Series(f"{label} · {source}", pts, panel=panel, style=legend(label),
                                            dashed=source == "client"))
    return out


def _speed_table(rows: Sequence[SettingRow], ev: Evidence, *, caption: str, with_run: bool = True) -> str:
    body = []
    for row in sorted(rows, key=lambda r: (str(r.key[0]), r.key[1], r.key[2], r.run.when)):
        newer = row.superseded_by.path.name if row.superseded_by else "?"
        status = (f"not claim-grade ({row.noisy}): shown, never binding" if row.noisy else
                  "binds (tip of its kind)" if row.binds else f"historical (superseded by {newer})")
        label = esc(row_label(row)) + (f"<span class='ci'>{esc(NOISE_FLOOR)}</span>" if row.noise_floor else "")
        for c in row.cells:
            vals: list[object] = [Safe(label), f"{c.context_tokens:,}"]
            for metric in ("prefill_tok_s", "decode_tok_s"):
                for source in ("client", "server"):
                    st = cell_stat(c, metric, source)
                    vals.append(mci(st.median, st.ci95_low, st.ci95_high))
            vals += [mci(c.ttft_ms.median, c.ttft_ms.ci95_low, c.ttft_ms.ci95_high, 1), f"{c.n_fresh}/{c.n}"]
            vals += [row.run.path.name, status] if with_run else []
            body.append(vals)
    head = ["setting", "prompt tokens", "prompt ÷ TTFT (client)", "prompt eval (server)", "decode client",
            "decode server",
            "TTFT ms", "fresh/n", *(["run", "status"] if with_run else [])]
    return table(head, body, numeric=(1, 2, 3, 4, 5, 6, 7), caption=caption)


def section(ctx: Ctx) -> str:
    rows = ctx.rows()
    parts = []
    if not rows:
        parts.append(note("no bench summary in these runs: nothing was measured (see the receipts below)"))
    else:
        series = speed_series(rows, ctx.legend)
        if series:
            svg = plots.line_panels(series, ["Prefill: prompt eval (server), prompt ÷ TTFT (client)", "Decode"],
                                    ["prompt tok/s", "generated tok/s"],
                                    "prompt tokens (context mark)", name=ctx.id("speed"),
                                    title="speed by context mark", logx=True)
            parts.append(figure(svg, "Medians with their 95% bootstrap intervals; solid line and dot: the server's "
                                      "own timings; dashed line and ring: what the client observed. Prefill is two "
                                      "quantities: the server's prompt eval rate, and the client's prompt tokens ÷ "
                                      "TTFT (queueing, HTTP and the first decode step included). Hover a point for "
                                      "its figures."))
        else:
            parts.append(note("the bench recorded no successful sample: no speed to draw"))
        parts.append(_speed_table(rows, ctx.ev, caption="medians in tok/s (TTFT in ms), 95% bootstrap interval "
                                  "under each",
                                  with_run=not ctx.group.single_run))
    old = ctx.ev.historical_settings if not ctx.group.single_run else []
    if old:
        parts.append(f"<details><summary>Historical only: {len(old)} older setting(s) of the same kind "
                     "(they never bind)</summary>" + _speed_table(old, ctx.ev, caption="historical") + "</details>")
    focus = {r.run.path for r in rows}
    noisy = [r for r in ctx.ev.noisy_settings if r.run.path not in focus] if not ctx.group.single_run else []
    if noisy:
        target = ctx.ev.pack.claims.interval_target_pct
        parts.append(f"<details open><summary>Not claim-grade: {len(noisy)} setting(s) measured on a busy host, "
                     "with stalls or with an interval wider than the "
                     + (f"±{target:g}% " if target is not None else "") + "target (labelled, never binding)"
                     "</summary>" + _speed_table(noisy, ctx.ev, caption="not claim-grade") + "</details>")
    drift = [d for d in ctx.ev.drift if not ctx.group.single_run or d.new.path in focus]
    if drift:
        parts.append("<h3>Stability</h3><p>Runs of one setting on the same pins and host that differ by more "
                     "than the 95% interval:</p><ul>"
                     + "".join(f"<li>{esc(_drift_text(d))}</li>" for d in drift) + "</ul>")
    return "".join(parts)


def _drift_text(d: Drift) -> str:
    preset, gen, conc = d.key
    return (f"{preset} ctx {d.context_tokens:,} × c{conc} @ {gen} gen: {d.metric} {d.new_median:,.2f} in "
            f"{d.new.path.name} vs {d.previous_median:,.2f} in {d.previous.path.name} ({d.change_pct:+.1f}%; "
            f"outside the {d.interval_of} run's 95% interval {d.interval[0]:,.2f}–{d.interval[1]:,.2f}). "
            f"Likely cause: {'; '.join(d.causes)}.")

