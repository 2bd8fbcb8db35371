"""A load point's send timing, pure: the rate its arrivals achieved (`achieved_rate`), its launch lag figures and
whether they say the client limited it (`launch_lag`, against the bound `client_lag_bound` chooses). When an open
point's arrivals are planned is the open shape's (`bench.shapes.open_loop.arrival_offsets`).

Launch lag: every request has a scheduled send (open: its planned arrival; closed and agent: the moment its
stream was free to send — a stream's first request at its start slot, the streams' starts staggered by
`stream_gap_s`, so N streams do not all ask for the wire in the same instant; later ones when the stream's previous
response ended) and an actual send (the request line on the wire). The difference is the launch lag: time the
client held a request back. A point whose lag p99 exceeds the client's bound (`client_lag_bound`), or that dropped
an arrival at the client's own in-flight bound, is client-limited: it measured the client, not the server.

A point that met its SLOs is client-limited too when its requests were too few to build its load (`load_held`): N
streams never had N requests in flight at once, or an open point sent fewer than twice the requests its rate keeps
in flight (rate × e2e p50), so the server never held that rate. It measured the request budget (--requests,
--duration), not the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servepack.bench.load_settings import LoadSample
from servepack.bench.stats import quantile

LAG_BOUND_MS = 10.0  # launch lag p99 above this marks a point client-limited (or a flag's bound) ...
LAG_BOUND_TTFT_SHARE = 0.05  # ... or this share of the tightest TTFT SLO bound, when that is larger


def client_lag_bound(explicit_ms: float | None, ttft_bounds_ms: list[float]) -> tuple[float, str]:
    """The launch-lag p99 above which a point is client-limited, and where that bound came from."""
    if explicit_ms is not None:
        return explicit_ms, "set (--client-lag-bound)"
    if ttft_bounds_ms:
        # The looser of the two: below 10 ms an event loop's own timing noise on any host dominates, and with a
        # loose TTFT SLO a lag of 5% of its bound neither moves a TTFT verdict nor the offered load by much.
        tight = min(ttft_bounds_ms)
        share = round(LAG_BOUND_TTFT_SHARE * tight, 3)
        if share > LAG_BOUND_MS:
            return share, f"{LAG_BOUND_TTFT_SHARE:.0%} of the TTFT SLO bound {tight:g} ms"
        return LAG_BOUND_MS, (f"default {LAG_BOUND_MS:g} ms ({LAG_BOUND_TTFT_SHARE:.0%} of the TTFT SLO bound "
                              f"{tight:g} ms is less)")
    return LAG_BOUND_MS, f"default {LAG_BOUND_MS:g} ms (no TTFT SLO)"


@dataclass(frozen=True)
class LaunchLag:
    """A point's launch lag figures and whether they say the client, not the server, limited it."""

    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    bound_ms: float
    client_limited: bool
    reason: str | None


def launch_lag(samples: list[LoadSample], bound_ms: float, max_in_flight: int | None = None) -> LaunchLag:
    """p50/p99/max of the sent requests' launch lag; client-limited when p99 > bound or an arrival was dropped."""
    lags = sorted(s.launch_lag_ms for s in samples if s.launch_lag_ms is not None)

    def q(f: float) -> float | None:
        if not lags:
            return None
        pos = (len(lags) - 1) * f
        lo = math.floor(pos)
        hi = min(lo + 1, len(lags) - 1)
        return round(lags[lo] + (lags[hi] - lags[lo]) * (pos - lo), 3)

    p50, p99 = q(0.5), q(0.99)
    dropped = sum(1 for s in samples if s.dropped)
    reason = None
    if p99 is not None and p99 > bound_ms:
        reason = (f"launch lag p99 {p99:,.1f} ms > the client bound {bound_ms:g} ms: the client could not send "
                  "on time, so this point measured the client, not the server")
    elif dropped:
        bound = f" ({max_in_flight} in flight)" if max_in_flight else ""
        reason = f"{dropped} arrival{'s' if dropped != 1 else ''} dropped at the client's in-flight bound{bound}"
    return LaunchLag(p50_ms=p50, p99_ms=p99, max_ms=lags[-1] if lags else None, bound_ms=bound_ms,
                     client_limited=reason is not None, reason=reason)


def achieved_rate(send_times: list[float]) -> float | None:
    """Arrivals a second between the first and the last send: (n − 1) ÷ span."""
    if len(send_times) < 2:
        return None
    span = max(send_times) - min(send_times)
    return (len(send_times) - 1) / span if span > 0 else None


def peak_in_flight(samples: list[LoadSample]) -> int:
    """The most requests in flight at once, from each sent request's own interval (its send to its last byte, on the
    point's clock, which a spread point's workers share)."""
    edges: list[tuple[float, int]] = []
    for s in samples:
        if not s.dropped and s.e2e_ms is not None:
            edges += [(s.sent_s, 1), (s.sent_s + s.e2e_ms / 1000, -1)]
    peak = now = 0
    for _, step in sorted(edges):  # at a tie an end (-1) sorts first: back to back is not overlapping
        now += step
        peak = max(peak, now)
    return peak


def load_held(samples: list[LoadSample], level: float, *, counts_streams: bool, scheduled: bool) -> str | None:
    """Why the point's requests never built its load, or None (held, or not judgeable: no request ended).

    Streams or sessions (`counts_streams`): the most requests in flight at once must reach the level; with fewer
    requests than streams, or streams that start (staggered) after the budget is spent, it never does. Arrivals at a
    rate (`scheduled`): a steady rate keeps rate × e2e p50 requests in flight (Little's law); the first that many
    arrivals only build it up, so the point must send at least twice that many to hold it as long again. Judge only
    a point that met its SLOs: a point that missed one with fewer requests than its load would miss it with more."""
    ended = sorted(s.e2e_ms for s in samples if not s.dropped and s.e2e_ms is not None)
    if not ended:
        return None
    if counts_streams:
        peak = peak_in_flight(samples)
        if peak < level:
            return (f"at most {peak} request{'s' if peak != 1 else ''} in flight at once for {level:g} streams: the "
                    f"point's {len(samples)} requests never built its load, so it measured the request budget, not "
                    "the server (raise --requests or --duration)")
        return None
    if scheduled:
        e2e = quantile(ended, 0.5)
        steady = level * e2e / 1000
        sent = sum(1 for s in samples if not s.dropped)
        if sent < 2 * steady:
            return (f"its {sent} request{'s' if sent != 1 else ''} are fewer than twice the {steady:,.1f} that "
                    f"{level:g} requests/s keeps in flight (rate × e2e p50 {e2e:,.1f} ms): the load never held its "
                    "steady state, so the point measured the request budget, not the server (raise --requests or "
                    "--duration)")
    return None
