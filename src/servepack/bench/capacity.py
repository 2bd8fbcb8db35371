"""The pure part of `servepack capacity`: SLOs, per-point statistics, the search, the knee, what limits.

- **SLO** `ttft_p90=2s`: metric, quantile, bound. Latencies (ttft, e2e, tpot, itl) must stay at or under their
  bound; rates (decode, prefill: tok/s per stream) at or over it. A failed or dropped request counts as the worst
  value (infinite latency, zero rate), so failures can never help a point pass. TTFT and prefill are taken from
  fresh requests only (warm ones with an agent shape, which is never a claim's).
- **Throughput**, three named definitions, all reported: `decode_tok_s_per_stream` (median of each request's
  own decode rate), `decode_tok_s_concurrent` (every stream's decode tokens ÷ the time at least one stream was
  decoding: the sum of concurrent streams' decode), `output_tok_s_wall` (all output tokens ÷ the point's wall
  time, first send to last byte: what GuideLLM and AIPerf print as output throughput).
- **Goodput**: requests a second that met every SLO on their own (ok, and each of their values within bound).
- **Search**: bracket by doubling from the start level until a level fails or the maximum is reached (halving
  instead when the start fails), then bisect between the highest pass and the lowest fail down to the
  resolution (one stream; or `rel_step` of the rate).
- **Knee**: the largest load whose point met every SLO with a client that kept up (`client_limited` not true);
  with no such point there is no knee, and the reason says why (no level met the SLOs, or only client-limited
  ones did). Never a default level.
- **Saturation**: the lowest measured level whose whole-run throughput is within `plateau` of the highest
  measured, provided latency then climbs (p90 TTFT at a higher level ≥ `climb` × its own); none when throughput
  was still growing at the highest level measured. The sweep probes past its SLO bracket until it shows.
- **Limit**: what limited each point, from the figures measured during it (`bench.limit`); the sweep's verdict is
  the lowest point that failed or was client-limited (or, when every level passed, the highest point's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import ConfigDict, Field

from servepack.bench.limit import Limit, PointFigures, classify_point
from servepack.bench.load import LAG_BOUND_MS, LoadSample, launch_lag
from servepack.bench.load_timing import load_held
from servepack.bench.observer import ObserverCost, PointEvidence
from servepack.bench.order import Band, PointRest, decode_band, quantile_band
from servepack.bench.roofline import WeightBytes
from servepack.bench.shapes import shape_for
from servepack.bench.stats import quantile
from servepack.errors import UsageError
from servepack.strict import Strict

# metric → (RequestSample field, unit, which side of the bound passes)
METRICS: dict[str, tuple[str, str, Literal["max", "min"]]] = {
    "ttft": ("ttft_ms", "ms", "max"),
    "e2e": ("e2e_ms", "ms", "max"),
    "tpot": ("tpot_ms", "ms", "max"),
    "itl": ("itl_ms_p90", "ms", "max"),
    "decode": ("decode_tok_s_client", "tok/s", "min"),
    "prefill": ("prompt_per_ttft_tok_s_client", "tok/s", "min"),
}
_SLO = re.compile(r"^(?P<metric>[a-z][a-z0-9]*)_(?P<q>p\d{1,2}(?:\.\d+)?|median|mean|max|min)="
                  r"(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|[-+]?(?:inf|infinity|nan))"
                  r"(?P<unit>ms|s|tok/s)?$", re.ASCII)
# The largest bound an SLO takes: a latency of a day (no request waits longer: the longest --timeout), a rate of
# 10 million tok/s (past any server). Larger, zero or negative bounds are "out of range", said with the range.
MAX_SLO_MS = 86_400_000.0
MAX_SLO_TOK_S = 10_000_000.0


class Slo(Strict):
    """One service-level objective: `quantile` of `metric` over a point's requests within `bound`."""

    model_config = ConfigDict(frozen=True)

    text: str
    metric: str
    field_name: str
    quantile: float
    bound: float = Field(description="ms for latencies, tok/s for rates")
    unit: str
    side: Literal["max", "min"]

    def met_by(self, value: float) -> bool:
        return value <= self.bound if self.side == "max" else value >= self.bound

    def describe(self) -> str:
        op = "≤" if self.side == "max" else "≥"
        return f"{self.metric} p{self.quantile * 100:g} {op} {self.bound:g} {self.unit}"


def parse_slo(text: str) -> Slo:
    """`ttft_p90=2s`, `e2e_p50=1500ms`, `decode_p10=10`; a bad one is a UsageError naming --slo and the fix."""
    raw = text.strip().lower().replace(" ", "")
    m = _SLO.match(raw)
    fix = ("write METRIC_pQ=VALUE, e.g. --slo ttft_p90=2s --slo decode_p10=10 (metrics: "
           + ", ".join(METRICS) + "; times in ms or s, rates in tok/s)")
    if not m:
        raise UsageError(f"--slo {text!r}: not an SLO; {fix}")
    metric = m["metric"]
    if metric not in METRICS:
        raise UsageError(f"--slo {text!r}: unknown metric {metric!r}; {fix}")
    name, unit, side = METRICS[metric]
    q = {"median": 0.5, "mean": 0.5, "max": 1.0, "min": 0.0}.get(m["q"]) if not m["q"].startswith("p") \
        else float(m["q"][1:]) / 100
    assert q is not None
    if not 0 <= q <= 1:
        raise UsageError(f"--slo {text!r}: quantile must be p0 to p99; {fix}")
    try:
        value = float(m["value"])
    except ValueError:
        raise UsageError(f"--slo {text!r}: {m['value']!r} is not a number; {fix}") from None
    given = m["unit"]
    if unit == "ms":
        if given == "tok/s":
            raise UsageError(f"--slo {text!r}: {metric} is a time (ms or s), not a rate; {fix}")
        value = value * 1000 if given == "s" else value
    elif given in ("ms", "s"):
        raise UsageError(f"--slo {text!r}: {metric} is a rate in tok/s, not a time; {fix}")
    most = MAX_SLO_MS if unit == "ms" else MAX_SLO_TOK_S
    if not math.isfinite(value) or not 0 < value <= most:
        span = "more than 0 to 86,400 s (a day)" if unit == "ms" else "more than 0 to 10,000,000 tok/s"
        raise UsageError(f"--slo {text!r}: {m['value']}{given or ''} is out of range: {metric} takes {span}; {fix}")
    return Slo(text=raw, metric=metric, field_name=name, quantile=q, bound=value, unit=unit, side=side)



def parse_slos(texts: Sequence[str]) -> list[Slo]:
    """Every --slo, each parsed by `parse_slo`; two on the same metric and quantile are refused (which bound would
    hold? the tighter one silently decided before), even when they agree."""
    slos = [parse_slo(t) for t in texts]
    seen: dict[tuple[str, float], Slo] = {}
    for slo in slos:
        key = (slo.metric, slo.quantile)
        if key in seen:
            raise UsageError(f"--slo {seen[key].text!r} and --slo {slo.text!r}: two bounds on {slo.metric} "
                             f"p{slo.quantile * 100:g}; give each metric and quantile once")
        seen[key] = slo
    return slos

class Throughput(Strict):
    """The three throughput definitions, named (tok/s)."""

    decode_tok_s_per_stream: float | None = Field(description="median over requests of one request's decode rate")
    decode_tok_s_concurrent: float | None = Field(description="Σ decode tokens ÷ time with ≥ 1 stream decoding")
    output_tok_s_wall: float | None = Field(description="Σ output tokens ÷ wall time (GuideLLM / AIPerf)")


class PointStats(Strict):
    """One sweep point, judged against the SLOs."""

    index: int
    level: float
    shape: str
    n: int
    n_ok: int
    n_fresh: int
    n_warm: int
    n_dropped: int
    wall_s: float = Field(description="the point's time: its first send to its last byte; open loop at least its "
                                      "arrivals ÷ the rate, so no rate over it exceeds the rate offered")
    requests_s: float
    goodput_rps: float = Field(description="requests a second that met every SLO on their own")
    good_fraction: float
    slo_values: dict[str, float | None]
    slo_met: dict[str, bool]
    passed: bool
    throughput: Throughput
    mean_concurrency: float = Field(description="Σ request durations ÷ wall time (Little's law)")
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    e2e_ms_p50: float | None
    cache_n_median: float | None = None
    cache_hit_fraction: float | None = Field(None, description="share of prompt tokens reused (agent turns)")
    rate_requested: float | None = None
    rate_scheduled: float | None = None
    rate_achieved: float | None = None
    lateness_ms_p99: float | None = None
    launch_lag_p50_ms: float | None = Field(None, description="scheduled → actual send, median over sent requests")
    launch_lag_p99_ms: float | None = None
    launch_lag_max_ms: float | None = None
    client_lag_bound_ms: float = Field(LAG_BOUND_MS, description="launch lag p99 above this: client-limited")
    client_limited: bool = Field(False, description="the client could not hold the load (lag p99 over the bound, "
                                 "arrivals dropped at its in-flight bound, or too few requests to build the load: "
                                 "`load_held`): never a knee or a headline")
    client_limited_reason: str | None = None
    over_slots: str | None = Field(None, description="more streams than the server's slots: the rest queue there")
    failures: list[str] = Field(default_factory=list)
    stopped: str | None = None
    observer: ObserverCost | None = None
    evidence: PointEvidence | None = Field(None, description="GPU, server threads and host during the point")
    limit: Limit | None = Field(None, description="what limited this point, from `evidence`")
    rest: PointRest | None = Field(None, description="how the server was found before the point: at rest or not, "
                                   "and the wait")
    bands: list[Band] = Field(default_factory=list, description="each SLO's quantile and the median per-stream "
                              "decode with their 95% intervals: the point's noise")
    repeat_of: int | None = Field(None, description="the index of the point this one measures again")


def level_unit(shape: str) -> str:
    return shape_for(shape).unit


def _value(s: LoadSample, slo: Slo, warm_ok: bool) -> float | None:
    """One request's value for an SLO; the worst value for a failure; None when it does not count."""
    worst = math.inf if slo.side == "max" else 0.0
    if not s.ok:
        return worst
    if slo.metric in ("ttft", "prefill") and not (s.fresh or warm_ok):
        return None
    v = getattr(s, slo.field_name)
    return float(v) if v is not None else (worst if slo.metric == "ttft" else None)


def _q(values: list[float], q: float) -> float | None:
    return quantile(sorted(values), q) if values else None


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def throughput(samples: Sequence[LoadSample], wall_s: float) -> Throughput:
    ok = [s for s in samples if s.ok and s.generated_tokens]
    per = sorted(s.decode_tok_s_client for s in ok if s.decode_tok_s_client is not None and not s.short_output)
    decode_tokens = sum((s.generated_tokens or 1) - 1 for s in ok if len(s.chunk_ms) > 1)
    windows = [(s.t_sent_unix + s.chunk_ms[0] / 1000, s.t_sent_unix + s.chunk_ms[-1] / 1000)
               for s in ok if len(s.chunk_ms) > 1]
    span = _union(windows)
    out_tokens = sum(s.generated_tokens or 0 for s in ok)
    return Throughput(decode_tok_s_per_stream=quantile(per, 0.5) if per else None,
                      decode_tok_s_concurrent=decode_tokens / span if span > 0 else None,
                      output_tok_s_wall=out_tokens / wall_s if wall_s > 0 else None)


def point_stats(index: int, level: float, samples: Sequence[LoadSample], wall_s: float, slos: Sequence[Slo], *,
                shape: str, rate_requested: float | None = None, rate_scheduled: float | None = None,
                rate_achieved: float | None = None, stopped: str | None = None,
                observer: ObserverCost | None = None, evidence: PointEvidence | None = None,
                lag_bound_ms: float = LAG_BOUND_MS, max_in_flight: int | None = None) -> PointStats:
    """Judge one point: each SLO's quantile over its requests, goodput, the throughputs, the client's lag."""
    load_shape = shape_for(shape)
    warm_ok = load_shape.warm
    values: dict[str, float | None] = {}
    met: dict[str, bool] = {}
    bands: list[Band] = []
    for slo in slos:
        vals = [v for s in samples if (v := _value(s, slo, warm_ok)) is not None]
        q = _q(vals, slo.quantile)
        values[slo.text] = None if q is None or math.isinf(q) else round(q, 3)
        met[slo.text] = q is not None and slo.met_by(q)
        band = quantile_band(vals, slo.quantile)
        bands.append(Band(figure=slo.text, value=values[slo.text], unit=slo.unit,
                          low=band[0] if band and math.isfinite(band[0]) else None,
                          high=band[1] if band and math.isfinite(band[1]) else None))
    bands.append(decode_band(samples))
    good = 0
    for s in samples:
        per = [_value(s, slo, warm_ok) for slo in slos]
        if s.ok and all(v is None or slo.met_by(v) for v, slo in zip(per, slos, strict=True)):
            good += 1
    ok = [s for s in samples if s.ok]
    ttft = [s.ttft_ms for s in ok if s.ttft_ms is not None and (s.fresh or warm_ok)]
    e2e = [s.e2e_ms for s in ok if s.e2e_ms is not None]
    busy = sum((s.e2e_ms or 0.0) / 1000 for s in samples if not s.dropped)
    cached = [float(s.cache_n) for s in ok if s.cache_n is not None]
    prompt_total = sum(s.server_prompt_tokens or 0 for s in ok if s.cache_n is not None)
    late = [s.lateness_ms for s in samples if s.lateness_ms is not None]
    n = len(samples)
    if load_shape.scheduled and level > 0:
        # n arrivals at `level` a second take n ÷ level of offered time; a sparse point (each request over before
        # the next arrives) ends long before that, and over its wall alone one request at 0.01/s read 80 requests/s
        wall_s = max(wall_s, n / level)
    lag = launch_lag(list(samples), lag_bound_ms, max_in_flight)
    passed = bool(samples) and bool(ok) and all(met.values())
    # only a pass can claim a load it never built: a miss with fewer requests than its load is a miss with more
    unheld = load_held(list(samples), level, counts_streams=load_shape.counts_streams,
                       scheduled=load_shape.scheduled) if passed else None
    return PointStats(
        index=index, level=level, shape=shape, n=n, n_ok=len(ok), n_fresh=sum(1 for s in ok if s.fresh),
        n_warm=sum(1 for s in samples if s.warm), n_dropped=sum(1 for s in samples if s.dropped),
        wall_s=round(wall_s, 6), requests_s=round(len(ok) / wall_s, 6) if wall_s > 0 else 0.0,
        goodput_rps=round(good / wall_s, 6) if wall_s > 0 else 0.0, good_fraction=round(good / n, 6) if n else 0.0,
        slo_values=values, slo_met=met, passed=passed,
        throughput=throughput(samples, wall_s), mean_concurrency=round(busy / wall_s, 4) if wall_s > 0 else 0.0,
        ttft_ms_p50=_q(ttft, 0.5), ttft_ms_p90=_q(ttft, 0.9), e2e_ms_p50=_q(e2e, 0.5),
        cache_n_median=_q(cached, 0.5),
        cache_hit_fraction=round(sum(cached) / prompt_total, 4) if prompt_total else None,
        rate_requested=rate_requested, rate_scheduled=rate_scheduled, rate_achieved=rate_achieved,
        lateness_ms_p99=_q(late, 0.99), stopped=stopped, observer=observer, evidence=evidence,
        launch_lag_p50_ms=lag.p50_ms, launch_lag_p99_ms=lag.p99_ms, launch_lag_max_ms=lag.max_ms,
        client_lag_bound_ms=lag_bound_ms, client_limited=lag.client_limited or unheld is not None,
        client_limited_reason=lag.reason or unheld,
        failures=list(dict.fromkeys(s.failure for s in samples if s.failure))[:5], bands=bands,
    )


@dataclass
class Search:
    """Bracket then bisect for the highest level that passes; feed it with `observe` after each `next_level`."""

    start: float
    maximum: float
    integer: bool = True
    rel_step: float = 0.1
    minimum: float | None = None
    best: float | None = None
    fail: float | None = None
    tried: list[tuple[float, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.start <= 0 or self.maximum < self.start:
            raise ValueError(f"search from {self.start} to {self.maximum}: the start must be > 0 and ≤ the maximum")
        if self.minimum is None:
            self.minimum = 1.0 if self.integer else self.start / 16

    def round(self, v: float) -> float:
        return float(int(v)) if self.integer else round(v, 6)

    def next_level(self) -> float | None:
        if not self.tried:
            return self.round(self.start)
        if self.best is None:  # nothing passed yet: halve down to the minimum
            assert self.fail is not None and self.minimum is not None
            low = self.round(self.fail / 2)
            if low < self.minimum or low >= self.fail:
                return None
            return low
        if self.fail is None:  # everything passed so far: double up to the maximum
            if self.best >= self.maximum:
                return None
            return self.round(min(self.best * 2, self.maximum))
        if self.integer:
            if self.fail - self.best <= 1:
                return None
            return float(int((self.best + self.fail) // 2))
        if self.fail - self.best <= self.rel_step * self.best:
            return None
        return self.round((self.best + self.fail) / 2)

    def observe(self, level: float, passed: bool) -> None:
        self.tried.append((level, passed))
        if passed:
            self.best = level if self.best is None else max(self.best, level)
        else:
            self.fail = level if self.fail is None else min(self.fail, level)


class Knee(Strict):
    """The largest load meeting every SLO with a client that kept up; None with the reason when there is none."""

    level: float | None
    reason: str


def _misses(p: PointStats, slos: Sequence[Slo]) -> list[str]:
    out = []
    for slo in slos:
        if p.slo_met.get(slo.text, True):
            continue
        v = p.slo_values.get(slo.text)
        op = ">" if slo.side == "max" else "<"
        got = "no value (every request failed)" if v is None else f"{v:,.1f} {slo.unit}"
        out.append(f"{slo.metric} p{slo.quantile * 100:g} {got} {op} {slo.bound:g} {slo.unit}")
    return out


def find_knee(points: Sequence[PointStats], slos: Sequence[Slo] = ()) -> Knee:
    """The knee (see the module doc); a point that stopped early (Ctrl-C, a dead server) is never one."""
    judged = sorted((p for p in points if p.stopped is None), key=lambda p: p.level)
    if not judged:
        return Knee(level=None, reason="no point finished")
    unit = level_unit(judged[0].shape)
    kept_up = [p for p in judged if p.passed and p.client_limited is not True]
    if kept_up:
        top = kept_up[-1]
        client = ("the client kept up" + (f" (launch lag p99 {top.launch_lag_p99_ms:,.1f} ms ≤ "
                                          f"{top.client_lag_bound_ms:g} ms)"
                                          if top.launch_lag_p99_ms is not None and top.client_lag_bound_ms is not None
                                          else "")
                  if top.client_limited is False else "the client's launch lag was not measured")
        return Knee(level=top.level, reason=f"the largest load measured that met every SLO: {top.level:g} {unit}; "
                                            f"{client}")
    limited = [p for p in judged if p.passed]
    if limited:
        lags = ", ".join(f"{p.level:g} ({p.launch_lag_p99_ms:,.1f} ms)" if p.launch_lag_p99_ms is not None
                         else f"{p.level:g}" for p in limited)
        return Knee(level=None, reason=f"the only levels that met every SLO were client-limited ({unit}, launch "
                                       f"lag p99: {lags}): the load generator, not the server, set their pace, "
                                       "so no load is known to meet the SLOs")
    low = judged[0]
    misses = "; ".join(_misses(low, slos)) or "the SLOs"
    return Knee(level=None, reason=f"no level met every SLO: even the lowest measured, {low.level:g} {unit}, "
                                   f"missed {misses}")


class Saturation(Strict):
    """Where throughput stops growing while latency climbs (None while it still grows)."""

    level: float | None
    reason: str


def find_saturation(points: Sequence[tuple[float, float | None, float | None]], *, plateau: float = 0.95,
                    climb: float = 1.2) -> Saturation:
    """`points`: (level, whole-run throughput, p90 latency). See the module doc for the rule."""
    pts = sorted((lv, t, lat) for lv, t, lat in points if t is not None)
    if len(pts) < 2:
        return Saturation(level=None, reason="fewer than two measured levels")
    top = max(t for _, t, _ in pts)
    if top <= 0:
        return Saturation(level=None, reason="no throughput measured")
    knee_i = next(i for i, (_, t, _) in enumerate(pts) if t >= plateau * top)
    level, _, lat = pts[knee_i]
    if knee_i == len(pts) - 1:
        return Saturation(level=None, reason=f"throughput still growing at the highest level measured ({level:g})")
    later = [lt for _, _, lt in pts[knee_i + 1:] if lt is not None]
    if lat is None or not later or max(later) < climb * lat:
        return Saturation(level=None, reason=f"throughput flat from {level:g} but latency did not climb "
                                             f"(≥ {climb:g}× its "
                                             f"{'p90 TTFT' if lat is not None else 'unknown latency'})")
    return Saturation(level=level, reason=f"throughput within {100 * (1 - plateau):g}% of its peak from {level:g} "
                                          f"while p90 TTFT climbs {max(later) / lat:.1f}× beyond it")


def point_limit(p: PointStats, measured: Sequence[PointStats], slos: Sequence[Slo], *,
                slots: int | None, weight_bytes_per_token: int | None = None, peak_gbs: float | None = None,
                peak_source: str | None = None, weight_bytes: WeightBytes | None = None) -> Limit:
    """What limited point `p`; per-stream decode is compared with the lowest load in `measured` (p included)."""
    ref = min((q for q in [*measured, p] if q.stopped is None and q.throughput.decode_tok_s_per_stream is not None),
              key=lambda q: q.level, default=None)
    return classify_point(PointFigures(
        level=p.level, passed=p.passed, slo_misses=_misses(p, slos), client_limited=p.client_limited,
        launch_lag_p99_ms=p.launch_lag_p99_ms, client_lag_bound_ms=p.client_lag_bound_ms,
        client_reason=p.client_limited_reason,
        decode_per_stream=p.throughput.decode_tok_s_per_stream,
        decode_reference=ref.throughput.decode_tok_s_per_stream if ref else None,
        reference_level=ref.level if ref else None, mean_concurrency=p.mean_concurrency, slots=slots,
        evidence=p.evidence, weight_bytes_per_token=weight_bytes_per_token, peak_gbs=peak_gbs,
        peak_source=peak_source, weight_bytes=weight_bytes))


def classify_limit(points: Sequence[PointStats], *, stopped: str | None = None) -> Limit:
    """The sweep's verdict: the lowest failing (or client-limited) point's limit, or the highest point's when every
    level passed with a client that kept up.

    Each point carries its own verdict (`PointStats.limit`, set by the sweep). `stopped` is why the sweep ended
    early (a memory guard, a dead server), said beside the verdict, never in place of one measured."""
    judged = sorted((p for p in points if p.stopped is None and p.limit is not None), key=lambda p: p.level)
    tail = f"; the sweep then stopped: {stopped}" if stopped else ""
    if not judged:
        return Limit(kind="none", reason=f"no point was judged{': ' + stopped if stopped else ''}")
    # A client-limited point is no pass (the search treats it so): the load stops there, and the client is why.
    failed = [p for p in judged if not p.passed or p.client_limited]
    if failed:
        p = failed[0]
        assert p.limit is not None
        what = "the client could not hold" if p.passed else "missed an SLO"
        return p.limit.model_copy(update={"reason": f"the lowest load that {what}, {p.limit.reason}{tail}"})
    top = judged[-1]
    assert top.limit is not None
    if top.limit.kind != "none":
        return top.limit.model_copy(update={"reason": f"every level met the SLOs; the highest, {top.limit.reason}"
                                                      f"{tail}"})
    if stopped:
        return top.limit.model_copy(update={"reason": f"no limit reached: every level measured met the SLOs with "
                                                      f"nothing at its limit, and the sweep stopped early: {stopped}"})
    return top.limit.model_copy(update={"reason": f"no limit reached: every level measured met the SLOs with "
                                                  f"nothing at its limit up to {top.level:g} (raise "
                                                  "--max-concurrency/--max-rate)"})
