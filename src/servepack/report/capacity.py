"""The two capacity charts, from plain numbers: throughput against latency (with the SLO line) and goodput
against load. Drawn with the report's matplotlib setup (`report.plots.chart`), so they match the HTML report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servepack.report.plots import INK, MUTED, chart, color, marker


@dataclass(frozen=True)
class CurvePoint:
    level: float
    output_tok_s: float | None
    ttft_ms_p90: float | None
    goodput_rps: float
    requests_s: float
    passed: bool


def throughput_latency_svg(points: Sequence[CurvePoint], *, ttft_bound_ms: float | None, unit: str,
                           knee: float | None, name: str = "capacity-curve") -> str:
    """Whole-run output tok/s (x) against p90 TTFT (y), one marker per level, the TTFT SLO as a line."""
    pts = sorted((p.level, p.output_tok_s, p.ttft_ms_p90, p.passed) for p in points
                 if p.output_tok_s is not None and p.ttft_ms_p90 is not None)
    with chart(height_in=3.4) as (c, axes):
        ax = axes[0]
        xs: list[float] = [x for _, x, _, _ in pts if x is not None]
        ys: list[float] = [y for _, _, y, _ in pts if y is not None]
        ax.plot(xs, ys, color=color(0), lw=1.3)
        for (level, _, _, passed), x, y in zip(pts, xs, ys, strict=True):
            gid = c.tip_gid(f"{level:g} {unit}: {x:,.1f} tok/s, p90 TTFT {y:,.0f} ms, "
                            f"{'meets' if passed else 'misses'} the SLOs")
            line = ax.plot([x], [y], marker=marker(0 if passed else 3), ms=6, color=color(0 if passed else 3),
                           ls="none")[0]
            if gid:
                line.set_gid(gid)
            ax.annotate(f"{level:g}" + (" (knee)" if knee is not None and level == knee else ""), (x, y),
                        textcoords="offset points", xytext=(5, 4), fontsize=8, color=MUTED)
        if ttft_bound_ms is not None:
            ax.axhline(ttft_bound_ms, color=INK, lw=1, ls="--", label=f"SLO TTFT {ttft_bound_ms:,.0f} ms")
            ax.legend(loc="upper left")
        ax.set_xlabel("output tok/s (whole run ÷ wall time)")
        ax.set_ylabel("p90 TTFT, ms")
        ax.set_title(f"Throughput against latency by load ({unit})", loc="left")
        return c.svg(name, "capacity: throughput against p90 TTFT")


def goodput_svg(points: Sequence[CurvePoint], *, unit: str, best: float | None, name: str = "capacity-goodput"
                ) -> str:
    """Goodput and all completed requests a second, against the load level."""
    pts = sorted(points, key=lambda p: p.level)
    with chart(height_in=3.2) as (c, axes):
        ax = axes[0]
        ax.plot([p.level for p in pts], [p.requests_s for p in pts], color=color(1), lw=1.2, ls="--",
                marker=marker(1), label="completed requests/s")
        ax.plot([p.level for p in pts], [p.goodput_rps for p in pts], color=color(2), lw=1.4, marker=marker(2),
                label="goodput (requests/s meeting every SLO)")
        if best is not None:
            ax.axvline(best, color=INK, lw=1, ls=":", label=f"highest level meeting the SLOs: {best:g}")
        ax.set_xlabel(f"load ({unit})")
        ax.set_ylabel("requests/s")
        ax.set_ylim(0, None)
        ax.set_title("Goodput against load", loc="left")
        ax.legend(loc="upper left")
        return c.svg(name, "capacity: goodput against load")
