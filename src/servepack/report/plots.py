"""Static SVG charts (matplotlib, Agg): inlined in the page, no script, text kept as text.

Every chart takes plain numbers and labels, never records, so the page module decides what is shown. Labels from
records are written by matplotlib's SVG backend as escaped XML text (math parsing off), and each point can carry a
hover tooltip as an SVG <title>, so the page needs no JavaScript.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape as xml_escape

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Okabe-Ito: distinguishable with the common colour-vision deficiencies, and in greyscale print by marker/dash.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#B8A800")
SPANS = ("#56B4E9", "#E69F00", "#009E73", "#CC79A7")  # phase shading, light at alpha 0.12
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
INK, GRID, MUTED = "#222222", "#dddddd", "#666666"
WIDTH_IN = 9.0

RC: dict[str, Any] = {
    "svg.fonttype": "none",  # text stays text: searchable, selectable, small
    "svg.hashsalt": "servepack-report",  # stable ids, so the same data renders the same bytes
    "text.parse_math": False,  # a "$" in a preset name is a dollar sign, not TeX
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9.5,
    "axes.edgecolor": "#888888",
    "axes.labelcolor": INK,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": GRID,
    "grid.linewidth": 0.6,
    "xtick.color": MUTED,
    "ytick.color": MUTED,
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "path.simplify": True,
}


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def marker(i: int) -> str:
    return MARKERS[i % len(MARKERS)]


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    lo: float | None = None
    hi: float | None = None
    tip: str = ""
    label: str = ""  # a short annotation written beside the point


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[Point]
    panel: int = 0
    style: int = 0  # colour and marker index
    dashed: bool = False


class Chart:
    """One matplotlib figure being drawn, and the tooltips to attach to its points."""

    def __init__(self, fig: Figure) -> None:
        self.fig = fig
        self.tips: dict[str, str] = {}

    def tip_gid(self, text: str) -> str | None:
        if not text:
            return None
        gid = f"tip{len(self.tips)}"
        self.tips[gid] = text
        return gid

    def svg(self, name: str, title: str) -> str:
        buf = io.StringIO()
        self.fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
        return finish_svg(buf.getvalue(), name, title, self.tips)


@contextmanager
def chart(nrows: int = 1, ncols: int = 1, height_in: float = 3.2, width_in: float = WIDTH_IN,
          sharey: bool = False) -> Iterator[tuple[Chart, list[Axes]]]:
    # Imported here, so commands that draw nothing do not pay for matplotlib; no pyplot, so no global figure
    # registry and no GUI backend: a Figure renders itself to SVG.
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):  # type: ignore[arg-type]
        fig = Figure(figsize=(width_in, height_in))
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)
        yield Chart(fig), [ax for row in axes for ax in row]


_TAG = re.compile(r"<[^>]+>")
_DECIMALS = re.compile(r"(\d\.\d\d)\d+")
_FONT = re.compile(r"font-family: [^;\"]*; ?")
_ID = re.compile(r'(\bid="|url\(#|href="#)([A-Za-z0-9_.:-]+)')


def finish_svg(svg: str, name: str, title: str, tips: dict[str, str]) -> str:
    """Matplotlib's SVG made fit to inline: no prolog or metadata, ids unique per chart, tooltips, scalable."""
    start = svg.find("<svg")
    svg = svg[start:]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    for gid, text in tips.items():
        svg = svg.replace(f'<g id="{gid}">', f'<g id="{gid}"><title>{xml_escape(text)}</title>', 1)
    # Smaller without a visible change: two decimals of a point are a hundredth of a pixel; the font family is
    # set once by the page's style sheet instead of on every text element.
    svg = _TAG.sub(lambda m: _DECIMALS.sub(r"\1", m.group(0)), svg)  # inside tags only: text keeps its digits
    svg = _FONT.sub("", svg)
    prefix = re.sub(r"[^A-Za-z0-9-]", "-", name)
    svg = _ID.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)
    head_end = svg.find(">")
    head = re.sub(r'\s(width|height)="[^"]*"', "", svg[:head_end])
    head += f' role="img" aria-label="{xml_escape(title, {chr(34): "&quot;"})}" class="chart" data-chart="{prefix}"'
    return head + svg[head_end:]


def _plain_ticks(axis: Any) -> None:
    """Log-axis tick labels as plain numbers (matplotlib writes them as TeX, and math parsing is off here)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.6g}"))
    axis.set_minor_formatter(NullFormatter())


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _errorbar(c: Chart, ax: Axes, p: Point, *, col: str, mk: str, horizontal: bool = False, size: float = 5.5,
              filled: bool = True) -> None:
    gid = c.tip_gid(p.tip)
    lo = p.lo if _finite(p.lo) else p.y if not horizontal else p.x
    hi = p.hi if _finite(p.hi) else p.y if not horizontal else p.x
    if horizontal:
        err = [[max(p.x - lo, 0.0)], [max(hi - p.x, 0.0)]]  # type: ignore[operator]
        cont = ax.errorbar([p.x], [p.y], xerr=err, fmt=mk, color=col, ms=size, capsize=3, lw=1.4,
                           mfc=col if filled else "white")
    else:
        err = [[max(p.y - lo, 0.0)], [max(hi - p.y, 0.0)]]  # type: ignore[operator]
        cont = ax.errorbar([p.x], [p.y], yerr=err, fmt=mk, color=col, ms=size, capsize=3, lw=1.4,
                           mfc=col if filled else "white")
    if gid:
        cont.lines[0].set_gid(gid)


def line_panels(series: Sequence[Series], titles: Sequence[str], ylabels: Sequence[str], xlabel: str, *,
                name: str, title: str, logx: bool = False, height_in: float = 3.1) -> str:
    """Medians joined by lines, each with its 95% interval as an error bar; one panel per title."""
    n_labels = len({s.label for s in series})
    with chart(1, len(titles), height_in=height_in + 0.22 * -(-n_labels // 2)) as (c, axes):
        for s in series:
            ax = axes[s.panel]
            col, mk = color(s.style), marker(s.style)
            pts = sorted(s.points, key=lambda p: p.x)
            ax.plot([p.x for p in pts], [p.y for p in pts], color=col, lw=1.3, ls="--" if s.dashed else "-",
                    label=s.label, marker=None)
            for p in pts:
                # Dashed series draw hollow and larger: equal medians show as a dot in a ring, not one hiding one.
                _errorbar(c, ax, p, col=col, mk=mk, filled=not s.dashed, size=7.5 if s.dashed else 5.0)
                if p.label:
                    ax.annotate(p.label, (p.x, p.y), textcoords="offset points", xytext=(5, 5), fontsize=8,
                                color=MUTED)
        xs = sorted({p.x for s in series for p in s.points})
        for ax, t, yl in zip(axes, titles, ylabels, strict=True):
            ax.set_title(t, loc="left")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(yl)
            if logx and len(xs) > 1:
                ax.set_xscale("log", base=2)
                _plain_ticks(ax.xaxis)
            if xs and len(xs) <= 8:
                ax.set_xticks(xs, [f"{x:,.0f}" for x in xs])
                ax.minorticks_off()
            tops = [max(p.y, p.hi) if p.hi is not None and _finite(p.hi) else p.y
                    for s in series if axes[s.panel] is ax for p in s.points]
            ax.set_ylim(0, max(tops) * 1.12 if tops and max(tops) > 0 else None)
            if len(xs) == 1:
                ax.set_xlim(xs[0] / 2, xs[0] * 2) if logx else ax.set_xlim(xs[0] - 1, xs[0] + 1)
        _shared_legend(c, axes, ncol=2 if len(axes) > 1 else 3)
        return c.svg(name, title)


@dataclass(frozen=True)
class Ecdf:
    label: str
    values: Sequence[float]  # counted samples: their ECDF is drawn
    marked: Sequence[float] = ()  # shown as crosses under the curve (unfresh: excluded from the statistic)
    style: int = 0


ECDF_DOTS_MAX = 60
ECDF_STEPS_MAX = 400


def _ecdf_steps(vals: Sequence[float]) -> tuple[list[float], list[float]]:
    """The ECDF's corners; past ECDF_STEPS_MAX samples, evenly spaced quantiles (the curve looks the same)."""
    n = len(vals)
    if n <= ECDF_STEPS_MAX:
        return list(vals), [(i + 1) / n for i in range(n)]
    idx = sorted({round(k * (n - 1) / (ECDF_STEPS_MAX - 1)) for k in range(ECDF_STEPS_MAX)})
    return [vals[i] for i in idx], [(i + 1) / n for i in idx]


def ecdf_panels(panels: Sequence[tuple[str, str, Sequence[Ecdf]]], *, name: str, title: str,
                marked_label: str = "unfresh (not counted)") -> str:
    """Empirical CDFs, one panel per (title, x label, curves); marked samples drawn as a rug of crosses."""
    n_labels = len({cur.label for _, _, curves in panels for cur in curves}) + 1
    with chart(1, len(panels), height_in=3.0 + 0.22 * -(-n_labels // 3)) as (c, axes):
        marked_drawn = False
        for ax, (t, xl, curves) in zip(axes, panels, strict=True):
            for cur in curves:
                col = color(cur.style)
                vals = sorted(cur.values)
                if vals:
                    xs, ys = _ecdf_steps(vals)
                    ax.step([xs[0], *xs], [0.0, *ys], where="post", color=col, lw=1.5, label=cur.label)
                    gid = c.tip_gid(f"{cur.label}: median {vals[len(vals) // 2]:,.1f}, n={len(vals)}")
                    # Every sample as a dot while they are few; past that the curve alone (the page stays small).
                    dots = ax.plot(xs if len(vals) <= ECDF_DOTS_MAX else [vals[len(vals) // 2]],
                                   ys if len(vals) <= ECDF_DOTS_MAX else [0.5], ls="none",
                                   marker=marker(cur.style), ms=3 if len(vals) <= ECDF_DOTS_MAX else 6, color=col)
                    if gid:
                        dots[0].set_gid(gid)
                if cur.marked:
                    ax.plot(sorted(cur.marked), [0.02] * len(cur.marked), ls="none", marker="x", ms=6, color=col,
                            mew=1.4, label=marked_label if not marked_drawn else None)
                    marked_drawn = True
            ax.set_title(t, loc="left")
            ax.set_xlabel(xl)
            ax.set_ylabel("share of samples ≤ x")
            ax.set_ylim(0, 1.04)
            ax.set_xlim(left=0)
        _shared_legend(c, axes)
        return c.svg(name, title)


def _shared_legend(c: Chart, axes: Sequence[Axes], ncol: int = 3) -> None:
    """One legend under all panels, each label once (the panels share their series); n= counts dropped."""
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if not handles:
        c.fig.tight_layout()
        return
    longest = max(len(lab) for lab in labels)
    ncol = min(ncol, 3 if longest <= 32 else 2 if longest <= 52 else 1)  # never wider than the figure
    rows = -(-len(labels) // ncol)
    c.fig.legend(handles, labels, loc="lower center", ncol=min(ncol, len(labels)), bbox_to_anchor=(0.5, 0.0))
    c.fig.tight_layout(rect=(0, min(0.07 * rows, 0.5), 1, 1))


@dataclass(frozen=True)
class Line:
    label: str
    x: Sequence[float]
    y: Sequence[float | None]
    style: int = 0
    dashed: bool = False
    panel: int = 0


def timeline(lines: Sequence[Line], *, titles: Sequence[str], hlines: Sequence[tuple[int, float, str]] = (),
             vlines: Sequence[tuple[float, str]] = (), spans: Sequence[tuple[float, float, str]] = (),
             events: Sequence[tuple[int, float, float, str]] = (), xlabel: str, ylabel: str, name: str,
             title: str) -> str:
    """Series over time in stacked panels sharing the time axis; thresholds as dotted lines, marks as vertical
    lines, phases as shaded spans labelled on the top panel."""
    xs = [x for ln in lines for x in ln.x]
    width = (max(xs) - min(xs)) if xs else 0.0
    with chart(len(titles), 1, height_in=1.2 + 2.0 * len(titles)) as (c, axes):
        for ax in axes[1:]:
            ax.sharex(axes[0])
        for pi, ax in enumerate(axes):
            for i, (x0, x1, label) in enumerate(spans):
                ax.axvspan(x0, x1, color=SPANS[i % len(SPANS)], alpha=0.12, lw=0)
                if pi == 0 and x1 - x0 >= 0.08 * width:  # a narrow phase is named in the table, not over others
                    ax.annotate(label, ((x0 + x1) / 2, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 2),
                                textcoords="offset points", ha="center", va="bottom", fontsize=7.5, color=MUTED)
            for i, (x, label) in enumerate(vlines):
                ax.axvline(x, color=MUTED, lw=0.8, ls="-", alpha=0.6)
                if pi == 0:
                    ax.annotate(label, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -4 - 11 * (i % 3)),
                                textcoords="offset points", fontsize=7.5, color=MUTED, va="top")
        for ln in lines:
            xs = [x for x, y in zip(ln.x, ln.y, strict=True) if y is not None]
            ys = [y for y in ln.y if y is not None]
            axes[ln.panel].plot(xs, ys, color=color(ln.style), lw=1.4, ls="--" if ln.dashed else "-", label=ln.label)
        for panel, y, label in hlines:
            axes[panel].axhline(y, color="#B00020", lw=1.1, ls=":", label=label)
        for panel, x, y, label in events:
            gid = c.tip_gid(label)
            dots = axes[panel].plot([x], [y], marker="X", ms=9, color="#B00020", ls="none", label="guard crossed")
            if gid:
                dots[0].set_gid(gid)
        for ax, t in zip(axes, titles, strict=True):
            ax.set_title(t, loc="left", pad=14 if ax is axes[0] and spans else 6)
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.set_xlim(left=0)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        axes[-1].set_xlabel(xlabel)
        c.fig.tight_layout()
        return c.svg(name, title)


@dataclass(frozen=True)
class Bar:
    label: str  # the series, e.g. "strict"
    value: float
    lo: float | None = None
    hi: float | None = None
    tip: str = ""
    text: str = ""  # written at the bar's end


def grouped_hbars(groups: Sequence[tuple[str, Sequence[Bar]]], *, xlabel: str, name: str, title: str,
                  xmax: float | None = None, styles: dict[str, int] | None = None) -> str:
    """Horizontal bars, one group per row (top to bottom), one bar per series; intervals as whiskers."""
    series = list(dict.fromkeys(b.label for _, bars in groups for b in bars))
    styles = styles or {s: i for i, s in enumerate(series)}
    k = max(len(series), 1)
    h = 0.8 / k
    height = max(1.6, 0.5 + 0.28 * k * len(groups) + 0.5)
    with chart(height_in=min(height, 9.0)) as (c, axes):
        ax = axes[0]
        seen: set[str] = set()
        for gi, (_, bars) in enumerate(groups):
            for b in bars:
                si = series.index(b.label)
                y = gi + (si - (k - 1) / 2) * h
                col = color(styles.get(b.label, si))
                rect = ax.barh([y], [b.value], height=h * 0.9, color=col, alpha=0.85,
                               label=b.label if b.label not in seen else None)
                seen.add(b.label)
                gid = c.tip_gid(b.tip)
                if gid:
                    rect.patches[0].set_gid(gid)
                if _finite(b.lo) and _finite(b.hi):
                    ax.errorbar([b.value], [y], xerr=[[max(b.value - b.lo, 0)], [max(b.hi - b.value, 0)]],  # type: ignore[operator]
                                fmt="none", ecolor=INK, capsize=2.5, lw=1)
                if b.text:
                    ax.annotate(b.text, (b.hi if _finite(b.hi) else b.value, y), xytext=(4, 0),
                                textcoords="offset points", va="center", fontsize=8, color=INK)
        ax.set_yticks(range(len(groups)), [g for g, _ in groups])
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        ax.grid(axis="y", visible=False)
        ax.set_xlim(0, xmax if xmax is not None else None)
        if xmax is None:
            ax.set_xlim(0, ax.get_xlim()[1] * 1.12)
        if len(series) > 1:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        c.fig.tight_layout()
        return c.svg(name, title)


@dataclass(frozen=True)
class ForestRow:
    label: str
    ratio: float
    lo: float
    hi: float
    emphasis: bool = False  # a promotion metric: filled marker, bold label
    tip: str = ""
    verdict: str = ""


def forest(rows: Sequence[ForestRow], *, xlabel: str, name: str, title: str) -> str:
    """Ratios with their 95% intervals against the line of no difference (1.0), on a log axis."""
    height = 1.0 + 0.34 * len(rows)
    with chart(height_in=min(max(height, 2.4), 10.0)) as (c, axes):
        ax = axes[0]
        for i, r in enumerate(rows):
            col = {"better": PALETTE[2], "worse": PALETTE[3]}.get(r.verdict, MUTED)
            _errorbar(c, ax, Point(r.ratio, i, r.lo, r.hi, tip=r.tip), col=col, mk="D" if r.emphasis else "o",
                      horizontal=True, filled=r.emphasis)
            ax.annotate(f"×{r.ratio:.3f} [{r.lo:.3f}–{r.hi:.3f}] {r.verdict}", (r.hi, i), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=8, color=col)
        ax.axvline(1.0, color=INK, lw=1, ls="--")
        lo = min([r.lo for r in rows] + [1.0])
        hi = max([r.hi for r in rows] + [1.0])
        if hi / lo >= 4:  # wide ratios read best on a log axis, where ×2 and ÷2 are the same distance from 1
            from matplotlib.ticker import LogLocator

            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            _plain_ticks(ax.xaxis)
            span = hi / lo
            ax.set_xlim(lo / span**0.08, hi * span**0.7)
            xlabel += " (log scale)"
        else:
            pad = max(hi - lo, 0.02)
            ax.set_xlim(lo - pad * 0.08, hi + pad * 0.75)  # room on the right for the written figures
        ax.set_yticks(range(len(rows)), [r.label for r in rows])
        for t, r in zip(ax.get_yticklabels(), rows, strict=True):
            t.set_fontweight("bold" if r.emphasis else "normal")
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        ax.grid(axis="y", visible=False)
        c.fig.tight_layout()
        return c.svg(name, title)


@dataclass
class Legend:
    """Stable style indices for labels across several charts of one page."""

    order: list[str] = field(default_factory=list)

    def __call__(self, key: str) -> int:
        if key not in self.order:
            self.order.append(key)
        return self.order.index(key)
