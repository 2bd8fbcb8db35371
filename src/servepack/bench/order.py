"""Points that do not depend on the order they were measured in: each starts from a server at rest, and the sweep
measures again its first point and its knee to check that what it found holds.

- **At rest** (`wait_at_rest`): before a point the engine's own check (`Endpoint.at_rest`: llama-server's /slots
  and /metrics, vLLM's /metrics) must say "no request in flight, every slot idle" `SETTLE_READS` times in a row;
  the wait (and an answer of "unknown", or a server still busy after the timeout) is recorded with the point.
- **Noise** of a point (`bands`): a 95% distribution-free interval of each SLO's quantile and of the median
  per-stream decode rate, from the order statistics of its own requests (no distribution assumed).
- **Independence** (`compare_repeat`): a repeat differs from its original beyond noise when, for one of those
  figures, the two intervals do not overlap and the values differ by at least `MIN_CHANGE` (and a latency by
  `MIN_CHANGE_MS`), so that many requests and a tight interval cannot call a trivial shift a dependence. Any
  such figure marks the sweep order-dependent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Final

from pydantic import Field

from servepack.bench.load import LoadSample
from servepack.bench.stats import quantile
from servepack.engine.base import Endpoint, Rest
from servepack.strict import Strict

SETTLE_READS: Final = 2  # two reads in a row at rest: one read can land between a request's end and the next
POLL_S: Final = 0.1
REST_TIMEOUT_S: Final = 120.0
Z95: Final = 1.96
# A repeat whose figure moved less than this is never called order-dependent, however tight the intervals: a
# quarter is well above the 5% half-width bench cells aim for and the jitter of a point on a shared host, and well
# below the moves order dependence made on the H100 (TTFT p90 +589%, throughput −39%; issue 32).
MIN_CHANGE: Final = 0.25
# Nor a latency that moved less than this many ms: timer and scheduler jitter of a loaded host, not the server.
MIN_CHANGE_MS: Final = 5.0
# Fewer requests give no interval worth the name: with 6, the p90's interval runs from the 3rd value to the largest,
# and one slow spell of the host moves it whole.
MIN_REQUESTS: Final = 10


class PointRest(Strict):
    """How the point's server was found before it started."""

    at_rest: bool | None = Field(description="True: at rest; False: still busy at the timeout; None: unknown")
    waited_s: float
    source: str = Field(description="what the engine read (/slots, /metrics), or none")
    reason: str = ""
    reads: int = 0
    fresh_server_s: float | None = Field(None, description="seconds the fresh server for this point took to start "
                                         "(--fresh-server-per-point), outside the point's timing")


def wait_at_rest(endpoint: Endpoint, *, timeout_s: float = REST_TIMEOUT_S, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 ) -> PointRest:
    """Poll the engine's "at rest?" until it says yes `SETTLE_READS` times in a row, it cannot tell, or the
    timeout passes; the point then starts whatever the answer, which is recorded with it."""
    t0 = clock()
    reads, in_row = 0, 0
    last: Rest | None = None
    while True:
        last = endpoint.at_rest()
        reads += 1
        if last.at_rest is None:
            break
        in_row = in_row + 1 if last.at_rest else 0
        if in_row >= SETTLE_READS or clock() - t0 >= timeout_s:
            break
        sleep(poll_s)
    waited = round(clock() - t0, 3)
    at_rest = None if last.at_rest is None else in_row >= SETTLE_READS
    return PointRest(at_rest=at_rest, waited_s=waited, source=last.source, reads=reads,
                     reason=last.reason if at_rest is not False else f"still busy after {waited:g} s: {last.reason}")


def quantile_band(values: Sequence[float], q: float) -> tuple[float, float] | None:
    """The 95% distribution-free interval of quantile `q` (order statistics, normal approximation to the
    binomial); None with fewer than `MIN_REQUESTS` values. A failed request's value is +inf or 0: kept."""
    n = len(values)
    if n < MIN_REQUESTS:
        return None
    xs = sorted(values)
    half = Z95 * math.sqrt(n * q * (1 - q))
    lo = max(0, math.floor(n * q - half) - 1)
    hi = min(n - 1, math.ceil(n * q + half))
    return xs[lo], xs[hi]


class Band(Strict):
    """A figure of a point and its 95% interval."""

    figure: str
    value: float | None
    low: float | None
    high: float | None
    unit: str


class FigureMove(Strict):
    """One figure, measured first and again."""

    figure: str
    unit: str
    first: float | None
    again: float | None
    change_pct: float | None
    beyond_noise: bool
    why: str


class Repeat(Strict):
    """A level measured again after the search, compared with its first measurement."""

    level: float
    first_index: int
    repeat_index: int
    role: str = Field(description="first point, or knee")
    passed_first: bool
    passed_again: bool
    moves: list[FigureMove]

    @property
    def moved(self) -> list[FigureMove]:
        return [m for m in self.moves if m.beyond_noise]


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def compare_band(a: Band, b: Band) -> FigureMove:
    """Beyond noise: the intervals do not overlap and the values differ by at least MIN_CHANGE."""
    first, again = _finite(a.value), _finite(b.value)
    change = None if first is None or again is None or first == 0 else (again - first) / abs(first)
    change_pct = None if change is None else round(100 * change, 1)
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return FigureMove(figure=a.figure, unit=a.unit, first=first, again=again, change_pct=change_pct,
                          beyond_noise=False, why=f"no interval: fewer than {MIN_REQUESTS} requests, or "
                          "failed ones at the quantile")
    apart = b.low > a.high or b.high < a.low
    small = (change is not None and abs(change) < MIN_CHANGE) or \
        (a.unit == "ms" and first is not None and again is not None and abs(again - first) < MIN_CHANGE_MS)
    if not apart:
        why = "within noise: the 95% intervals overlap"
    elif small:
        why = f"the intervals are apart but the change is under {MIN_CHANGE:.0%} (or {MIN_CHANGE_MS:g} ms)"
    else:
        why = (f"beyond noise: first {_fmt(first)} [{_fmt(a.low)}, {_fmt(a.high)}], again {_fmt(again)} "
               f"[{_fmt(b.low)}, {_fmt(b.high)}] {a.unit}")
    return FigureMove(figure=a.figure, unit=a.unit, first=first, again=again, change_pct=change_pct,
                      beyond_noise=apart and not small, why=why)


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return "∞" if math.isinf(v) else f"{v:,.1f}"


def compare_repeat(level: float, role: str, first: tuple[int, bool, Sequence[Band]],
                   again: tuple[int, bool, Sequence[Band]]) -> Repeat:
    """(index, passed, bands) of the first measurement and of the repeat → the figures compared."""
    by_name = {b.figure: b for b in again[2]}
    moves = [compare_band(b, by_name[b.figure]) for b in first[2] if b.figure in by_name]
    return Repeat(level=level, first_index=first[0], repeat_index=again[0], role=role, passed_first=first[1],
                  passed_again=again[1], moves=moves)


def decode_band(samples: Sequence[LoadSample]) -> Band:
    rates = [s.decode_tok_s_client for s in samples if s.ok and s.decode_tok_s_client is not None
             and not s.short_output]
    band = quantile_band(rates, 0.5)
    value = round(quantile(sorted(rates), 0.5), 3) if rates else None
    return Band(figure="decode per stream p50", value=value, low=band[0] if band else None,
                high=band[1] if band else None, unit="tok/s")


class Independence(Strict):
    """Whether the sweep's answer holds whatever order its points ran in: its first point and its knee measured
    again after the search. `order_dependent` None: not checked (`reason` says why)."""

    order_dependent: bool | None
    repeats: list[Repeat] = Field(default_factory=list)
    reason: str
    likely_carried: str | None = Field(None, description="what most likely carried over, when order-dependent")

    def lines(self, unit: str) -> list[str]:
        """What the receipt and the terminal say: the verdict, then each repeat's move."""
        head = ("capacity order: ORDER-DEPENDENT: " if self.order_dependent else
                "capacity order: independent: " if self.order_dependent is False else "capacity order: not checked: ")
        out = [head + self.reason]
        for r in self.repeats:
            moves = "; ".join(f"{m.figure} {_fmt(m.first)} → {_fmt(m.again)} {m.unit}"
                              + (f" ({m.change_pct:+.0f}%)" if m.change_pct is not None else "")
                              + (" BEYOND NOISE" if m.beyond_noise else " within noise") for m in r.moves)
            verdict = "" if r.passed_first == r.passed_again else \
                f"; {'PASS' if r.passed_first else 'fail'} first, {'PASS' if r.passed_again else 'fail'} again"
            out.append(f"  {r.role} {r.level:g} {unit} again (point {r.first_index} → {r.repeat_index}): "
                       f"{moves}{verdict}")
        if self.order_dependent and self.likely_carried:
            out.append(f"  what carried over: {self.likely_carried}")
        return out


def judge(repeats: Sequence[Repeat], carried: str, unit: str) -> Independence:
    """Order-dependent when any repeated figure moved beyond noise."""
    if not repeats:
        return Independence(order_dependent=None, reason="no point was measured again")
    moved = [(r, m) for r in repeats for m in r.moved]
    judged = [m for r in repeats for m in r.moves if "no interval" not in m.why]
    if not judged:
        return Independence(order_dependent=None, repeats=list(repeats),
                            reason=f"the repeats could not be judged: no figure had an interval (a point needs "
                                   f"{MIN_REQUESTS} requests or more, and no failures at the quantile)")
    if moved:
        r, m = moved[0]
        return Independence(
            order_dependent=True, repeats=list(repeats), likely_carried=carried,
            reason=f"{r.role} {r.level:g} {unit} measured again moved beyond its noise ({m.figure} "
                   f"{_fmt(m.first)} → {_fmt(m.again)} {m.unit}"
                   + (f", {m.change_pct:+.0f}%" if m.change_pct is not None else "")
                   + "): the points depend on what ran before them, so no knee is claimed from this sweep")
    flipped = [r for r in repeats if r.passed_first != r.passed_again]
    levels = ", ".join(f"{r.role} {r.level:g}" for r in repeats)
    if flipped:
        r = flipped[0]
        return Independence(order_dependent=False, repeats=list(repeats),
                            reason=f"{levels} {unit} measured again within noise, but {r.role} {r.level:g} "
                                   f"{'failed' if r.passed_first else 'passed'} again: it sits on the SLO's bound")
    return Independence(order_dependent=False, repeats=list(repeats),
                        reason=f"{levels} {unit} measured again after the search, every figure within noise")


def rest_line(rests: Sequence[PointRest | None]) -> str:
    """One line: how many points started from a server at rest, the longest wait, and the fresh servers."""
    known = [r for r in rests if r is not None]
    if not known:
        return "points at rest: not checked"
    at = [r for r in known if r.at_rest]
    busy = [r for r in known if r.at_rest is False]
    unknown = [r for r in known if r.at_rest is None]
    longest = max(r.waited_s for r in known)
    bits = [f"points at rest: {len(at)} of {len(known)} started from a server at rest "
            f"({known[0].source if at else 'no check answered'}; longest wait {longest:.1f} s)"]
    if busy:
        bits.append(f"{len(busy)} started with the server still busy after the timeout")
    if unknown:
        bits.append(f"{len(unknown)} unknown: {unknown[0].reason}")
    fresh = [r.fresh_server_s for r in known if r.fresh_server_s is not None]
    if fresh:
        bits.append(f"{len(fresh)} on a fresh server (start {min(fresh):.1f}–{max(fresh):.1f} s, outside timing)")
    return "; ".join(bits)
