"""The pure part of `servepack capacity`: SLO parsing, the search, the knee, the limit, arrivals, throughputs."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import pytest

from servepack.bench.capacity import (
    Search,
    find_saturation,
    parse_slo,
    point_stats,
    throughput,
)
from servepack.bench.load import LoadSample, achieved_rate, arrival_offsets, reply_text
from servepack.bench.observer import ObserverCost
from servepack.errors import UsageError

# -- SLOs --------------------------------------------------------------------------------------------------------


def test_parse_slo_units_and_sides() -> None:
    s = parse_slo("ttft_p90=2s")
    assert (s.metric, s.quantile, s.bound, s.side, s.field_name) == ("ttft", 0.9, 2000.0, "max", "ttft_ms")
    assert parse_slo("e2e_p50=1500ms").bound == 1500.0
    assert parse_slo("ttft_median=300").bound == 300.0  # ms when no unit
    d = parse_slo("decode_p10=10")
    assert (d.bound, d.side, d.quantile, d.unit) == (10.0, "min", pytest.approx(0.1), "tok/s")
    assert d.met_by(10.0) and d.met_by(12.0) and not d.met_by(9.99)
    assert s.met_by(2000.0) and not s.met_by(2000.1)


@pytest.mark.parametrize("bad, says", [
    ("ttft=2s", "not an SLO"), ("speed_p90=3", "unknown metric 'speed'"), ("decode_p10=10s", "is a rate"),
    ("ttft_p90=5tok/s", "is a time"), ("ttft_p90=0", "is out of range"), ("ttft_p90=", "not an SLO"),
])
def test_parse_slo_refuses(bad: str, says: str) -> None:
    with pytest.raises(UsageError, match="--slo") as err:
        parse_slo(bad)
    assert says in str(err.value) and "e.g. --slo ttft_p90=2s" in str(err.value)


# -- the search --------------------------------------------------------------------------------------------------


def _drive(search: Search, passes: Callable[[float], bool]) -> list[float]:
    seen = []
    while (level := search.next_level()) is not None:
        assert level not in seen, f"level {level} tried twice"
        seen.append(level)
        search.observe(level, passes(level))
    return seen


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 6, 7, 11, 16, 23, 63])
def test_integer_search_finds_the_exact_limit(limit: int) -> None:
    s = Search(start=1, maximum=64)
    tried = _drive(s, lambda lv: lv <= limit)
    assert s.best == limit and s.fail == (limit + 1 if limit < 64 else None)
    # bracket by doubling, then bisect: logarithmic, never a scan
    assert len(tried) <= 2 * math.ceil(math.log2(64)) + 1


def test_integer_search_doubles_then_bisects() -> None:
    s = Search(start=1, maximum=64)
    assert _drive(s, lambda lv: lv <= 5) == [1, 2, 4, 8, 6, 5]


def test_search_stops_at_the_maximum_and_when_nothing_passes() -> None:
    s = Search(start=1, maximum=12)
    assert _drive(s, lambda lv: True) == [1, 2, 4, 8, 12]
    assert s.best == 12 and s.fail is None
    none = Search(start=1, maximum=12)
    assert _drive(none, lambda lv: False) == [1] and none.best is None


def test_rate_search_halves_then_bisects_to_the_resolution() -> None:
    s = Search(start=8, maximum=100, integer=False, rel_step=0.05)
    tried = _drive(s, lambda r: r <= 3.3)
    assert tried[:3] == [8, 4, 2]
    assert s.best is not None and s.fail is not None and s.best <= 3.3 < s.fail
    assert s.fail - s.best <= 0.05 * s.best


def test_search_refuses_a_start_above_the_maximum() -> None:
    with pytest.raises(ValueError, match="start"):
        Search(start=10, maximum=4)


# -- saturation (where throughput goes flat; the knee itself is in test_capacity_limit.py) ----------------------

# A server with 4 slots: throughput grows to 4 streams, then holds while TTFT climbs with the queue.
SLOTS4 = [(1, 100.0, 50.0), (2, 200.0, 51.0), (3, 299.0, 52.0), (4, 398.0, 53.0), (5, 399.0, 120.0),
          (6, 400.0, 200.0), (8, 400.0, 400.0)]


def test_saturation_is_where_throughput_stops_growing_while_latency_climbs() -> None:
    k = find_saturation(SLOTS4)
    assert k.level == 4, k.reason
    # one step off is wrong, both ways
    assert k.level != 3 and k.level != 5


def test_saturation_moves_with_the_data() -> None:
    three = [(1, 100.0, 50.0), (2, 200.0, 50.0), (3, 300.0, 52.0), (4, 301.0, 100.0), (8, 300.0, 300.0)]
    assert find_saturation(three).level == 3
    assert find_saturation(list(reversed(three))).level == 3  # order of measurement does not matter


def test_no_saturation_when_still_growing_or_latency_flat() -> None:
    growing = [(1, 100.0, 50.0), (2, 200.0, 50.0), (4, 400.0, 50.0)]
    k = find_saturation(growing)
    assert k.level is None and "still growing" in k.reason
    flat = [(1, 100.0, 50.0), (2, 200.0, 50.0), (4, 200.0, 52.0)]
    assert find_saturation(flat).level is None
    assert find_saturation([(1, 100.0, 50.0)]).level is None


# -- arrivals ----------------------------------------------------------------------------------------------------


def test_constant_and_poisson_arrivals() -> None:
    assert arrival_offsets(4.0, 5, "constant", 1) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert achieved_rate(arrival_offsets(4.0, 41, "constant", 1)) == pytest.approx(4.0)
    a = arrival_offsets(10.0, 2001, "poisson", 7)
    assert a == arrival_offsets(10.0, 2001, "poisson", 7)  # seeded
    assert a != arrival_offsets(10.0, 2001, "poisson", 8)
    assert all(x < y for x, y in itertools.pairwise(a))
    assert achieved_rate(a) == pytest.approx(10.0, rel=0.06)
    assert arrival_offsets(0.0, 5, "constant", 1) == [] and achieved_rate([1.0]) is None


def test_reply_text_joins_deltas() -> None:
    ev = [(0.0, b'{"choices":[{"delta":{"role":"assistant","content":null}}]}'),
          (0.1, b'{"choices":[{"delta":{"content":" a"}}]}'), (0.2, b'{"choices":[{"delta":{"content":" b"}}]}'),
          (0.3, b"[DONE]")]
    assert reply_text(ev) == " a b"


# -- per-point statistics ----------------------------------------------------------------------------------------


def _sample(i: int, *, ttft: float, decode: float, ok: bool = True, t0: float = 0.0, gen: int = 11,
            fresh: bool = True) -> LoadSample:
    chunks = [ttft + k * 1000 / decode for k in range(gen)] if ok else []
    base: dict[str, Any] = dict(
        context_tokens=100, concurrency=1, round=0, stream=i, warmup=False, nonce=f"n{i}",
        endpoint_prompt_tokens=100, prompt_sized_exactly=True, server_prompt_tokens=100, gen_tokens_requested=gen,
        generated_tokens=gen if ok else None, generated_tokens_source="usage", t_sent_unix=t0, client_queue_ms=0.0,
        ttfr_ms=ttft if ok else None, ttft_ms=ttft if ok else None, e2e_ms=chunks[-1] if ok else 5.0,
        chunk_ms=chunks, itl_ms_median=None, itl_ms_p90=None, itl_ms_max=None, tpot_ms=None,
        prompt_per_ttft_tok_s_client=None, prompt_eval_tok_s_server=None, decode_tok_s_client=decode if ok else None,
        decode_tok_s_server=None, prefill_gap_pct=None, decode_gap_pct=None, timings=None, usage=None,
        finish_reason="length", http_status=200 if ok else None, ok=ok, failure=None if ok else "boom",
        fresh=fresh and ok, fresh_reason="cache_n == 0", short_output=False)
    return LoadSample(**base, point=0, shape="closed", level=2, sent_s=t0, in_flight=1)


def test_point_stats_slo_goodput_and_failures_as_worst() -> None:
    slos = [parse_slo("ttft_p50=100ms"), parse_slo("decode_p50=10")]
    good = [_sample(i, ttft=50, decode=20) for i in range(3)]
    slow = [_sample(3, ttft=500, decode=20)]
    p = point_stats(0, 2, good + slow, 2.0, slos, shape="closed")
    assert p.passed and p.goodput_rps == pytest.approx(1.5) and p.good_fraction == pytest.approx(0.75)
    # two failures: the median TTFT is now the failures' (infinite): the point fails, goodput counts only good
    failed = [_sample(4, ttft=0, decode=1, ok=False), _sample(5, ttft=0, decode=1, ok=False)]
    q = point_stats(0, 2, good + slow + failed, 2.0, slos, shape="closed")
    assert not q.passed and q.slo_met == {"ttft_p50=100ms": False, "decode_p50=10": True}
    assert q.goodput_rps == pytest.approx(1.5) and q.failures == ["boom"]
    # a non-fresh request's TTFT never counts for a single-shot shape
    warm = point_stats(0, 2, [_sample(0, ttft=50, decode=20), _sample(1, ttft=900, decode=20, fresh=False)],
                       1.0, [parse_slo("ttft_p90=100ms")], shape="closed")
    assert warm.passed and warm.n_fresh == 1


def test_three_throughputs_are_distinct_definitions() -> None:
    # two streams, each 11 tokens at 20 tok/s (10 decode gaps of 50 ms) starting 100 ms after send,
    # the second sent 0.25 s after the first; the point's wall time is 1 s.
    a, b = _sample(0, ttft=100, decode=20, t0=100.0), _sample(1, ttft=100, decode=20, t0=100.25)
    t = throughput([a, b], 1.0)
    assert t.decode_tok_s_per_stream == pytest.approx(20.0)
    # decode windows [100.1, 100.6] and [100.35, 100.85] → union 0.75 s; 20 decode tokens
    assert t.decode_tok_s_concurrent == pytest.approx(20 / 0.75)
    assert t.output_tok_s_wall == pytest.approx(22.0)


def test_observer_cost_combines_and_states_the_ratio() -> None:
    a = ObserverCost(wall_s=1, client_cpu_s=0.2, server_cpu_s=2.0, server_pids=[5], ratio=0.1)
    b = ObserverCost(wall_s=1, client_cpu_s=0.3, server_cpu_s=3.0, server_pids=[5], ratio=0.1)
    c = ObserverCost.combine([a, b])
    assert (c.client_cpu_s, c.server_cpu_s, c.ratio) == (0.5, 5.0, 0.1)
    assert "ratio 0.100" in c.sentence()
    unknown = ObserverCost.combine([a, ObserverCost(wall_s=1, client_cpu_s=0.1, note="no pid")])
    assert unknown.server_cpu_s is None and unknown.ratio is None and "unknown" in unknown.sentence()


# -- launch lag: the client's own bound ------------------------------------------------------------------------


def _lagged(lags: list[float | None], *, dropped: int = 0) -> list[LoadSample]:
    out = []
    for i, lag in enumerate(lags):
        s = _sample(i, ttft=50, decode=20)
        out.append(s.model_copy(update={"scheduled_s": 0.01 * i, "launch_lag_ms": lag}))
    for j in range(dropped):
        s = _sample(100 + j, ttft=0, decode=1, ok=False)
        out.append(s.model_copy(update={"dropped": True, "scheduled_s": 1.0 + j, "launch_lag_ms": None}))
    return out


def test_launch_lag_percentiles_and_the_client_limited_mark() -> None:
    # 100 requests: 98 sent 1 ms late, two 50 ms late. p99 interpolates between ranks 98 and 99 (1 → 50 ms).
    samples = _lagged([1.0] * 98 + [50.0, 50.0])
    p = point_stats(0, 8, samples, 2.0, [parse_slo("e2e_p90=5s")], shape="closed", lag_bound_ms=10.0)
    assert p.launch_lag_p50_ms == 1.0 and p.launch_lag_max_ms == 50.0
    assert p.launch_lag_p99_ms == pytest.approx(50.0) and p.client_lag_bound_ms == 10.0
    assert p.client_limited and "launch lag p99 50.0 ms > the client bound 10 ms" in (p.client_limited_reason or "")
    # the same requests with a 60 ms bound: the client kept up (the wrong answer would mark it anyway)
    q = point_stats(0, 8, samples, 2.0, [parse_slo("e2e_p90=5s")], shape="closed", lag_bound_ms=60.0)
    assert not q.client_limited and q.client_limited_reason is None and q.passed
    # one in a hundred late is under p99: not client-limited at 10 ms
    r = point_stats(0, 8, _lagged([1.0] * 99 + [500.0]), 2.0, [], shape="closed", lag_bound_ms=10.0)
    assert r.launch_lag_p99_ms is not None and r.launch_lag_p99_ms < 10.0 and not r.client_limited


def test_dropped_arrivals_mark_the_point_client_limited_even_with_no_lag() -> None:
    p = point_stats(0, 50.0, _lagged([0.5] * 20, dropped=3), 1.0, [], shape="open", lag_bound_ms=10.0,
                    max_in_flight=4)
    assert p.client_limited and p.n_dropped == 3
    assert p.client_limited_reason == "3 arrivals dropped at the client's in-flight bound (4 in flight)"
    assert p.launch_lag_p99_ms == pytest.approx(0.5)  # dropped arrivals have no lag: never counted as 0


def test_no_lag_figures_means_not_client_limited() -> None:
    p = point_stats(0, 1, [_sample(0, ttft=50, decode=20)], 1.0, [], shape="closed")
    assert p.launch_lag_p99_ms is None and not p.client_limited and p.client_lag_bound_ms == 10.0


def test_client_lag_bound_default_ttft_share_and_flag() -> None:
    from servepack.bench.load import client_lag_bound

    assert client_lag_bound(None, []) == (10.0, "default 10 ms (no TTFT SLO)")
    bound, source = client_lag_bound(None, [2000.0, 500.0])  # the tightest TTFT bound: 5% of 500 ms
    assert bound == 25.0 and "5% of the TTFT SLO bound 500 ms" in source
    # 5% of a 100 ms TTFT bound is 5 ms: under the 10 ms floor, so 10 ms holds
    assert client_lag_bound(None, [100.0]) == (10.0, "default 10 ms (5% of the TTFT SLO bound 100 ms is less)")
    assert client_lag_bound(3.5, [2000.0])[0] == 3.5  # a flag wins
