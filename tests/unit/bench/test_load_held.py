"""A point is client-limited when its requests were too few to build its load (`load_timing.load_held`): N streams
that never had N requests in flight at once, or arrivals at a rate fewer than twice what that rate keeps in flight
(rate × e2e p50). Such a point measured the request budget, not the server: a pass there is never the knee.

The wrong answers (before): `capacity --requests 3 --max-concurrency 64` claimed a knee of 64 streams, claim grade,
with at most 3 requests ever in flight; `--shape open --requests 3 --max-rate 10000` claimed 10,000 requests/s."""

from __future__ import annotations

from typing import Any

from servepack.bench.capacity import parse_slo, point_limit, point_stats
from servepack.bench.load import LoadSample
from servepack.bench.load_timing import load_held, peak_in_flight


def _req(sent_s: float, e2e_ms: float | None, *, scheduled_s: float | None = None, dropped: bool = False,
         ok: bool = True, shape: str = "closed") -> LoadSample:
    base: dict[str, Any] = dict(
        context_tokens=100, concurrency=1, round=0, stream=0, warmup=False, nonce="n", endpoint_prompt_tokens=100,
        prompt_sized_exactly=True, server_prompt_tokens=100, gen_tokens_requested=4, generated_tokens=4 if ok else None,
        generated_tokens_source="usage", t_sent_unix=sent_s, client_queue_ms=0.0, ttfr_ms=1.0 if ok else None,
        ttft_ms=1.0 if ok else None, e2e_ms=e2e_ms, chunk_ms=[1.0, 2.0, 3.0, e2e_ms or 4.0] if ok else [],
        itl_ms_median=None, itl_ms_p90=None, itl_ms_max=None, tpot_ms=None, prompt_per_ttft_tok_s_client=None,
        prompt_eval_tok_s_server=None, decode_tok_s_client=100.0 if ok else None, decode_tok_s_server=None,
        prefill_gap_pct=None, decode_gap_pct=None, timings=None, usage=None, finish_reason="length",
        http_status=200 if ok else None, ok=ok, failure=None if ok else "boom", fresh=ok, fresh_reason="cache_n == 0",
        short_output=False)
    return LoadSample(**base, point=0, shape=shape, level=1, sent_s=sent_s, scheduled_s=scheduled_s, in_flight=1,
                      dropped=dropped)


def test_the_peak_counts_overlaps_from_each_requests_own_interval() -> None:
    overlapping = [_req(0.0, 100.0), _req(0.01, 100.0), _req(0.02, 100.0)]
    assert peak_in_flight(overlapping) == 3
    back_to_back = [_req(0.0, 100.0), _req(0.1, 100.0), _req(0.2, 100.0)]  # one ends as the next is sent
    assert peak_in_flight(back_to_back) == 1
    # a dropped arrival and a request with no end never count
    assert peak_in_flight([_req(0.0, 100.0), _req(0.0, None), _req(0.0, 100.0, dropped=True)]) == 1


def test_streams_must_all_be_in_flight_at_once() -> None:
    three = [_req(0.0, 100.0), _req(0.01, 100.0), _req(0.02, 100.0)]
    why = load_held(three, 4, counts_streams=True, scheduled=False)
    assert why is not None and why.startswith("at most 3 requests in flight at once for 4 streams")
    assert "raise --requests or --duration" in why
    assert load_held(three, 3, counts_streams=True, scheduled=False) is None
    # many requests, one at a time: the budget was large, the load was still never built
    serial = [_req(0.1 * i, 90.0) for i in range(20)]
    assert load_held(serial, 2, counts_streams=True, scheduled=False) is not None
    assert load_held([_req(0.0, None, ok=False)], 8, counts_streams=True, scheduled=False) is None  # nothing ended


def test_arrivals_must_hold_twice_the_rates_steady_state() -> None:
    # 100 requests/s at an e2e of 100 ms keeps 10 in flight: 19 arrivals only build it up, 20 hold it as long again
    def arrivals(n: int) -> list[LoadSample]:
        return [_req(i / 100, 100.0, scheduled_s=i / 100, shape="open") for i in range(n)]

    why = load_held(arrivals(19), 100, counts_streams=False, scheduled=True)
    assert why is not None and why.startswith("its 19 requests are fewer than twice the 10.0 that 100 requests/s")
    assert load_held(arrivals(20), 100, counts_streams=False, scheduled=True) is None
    # a low rate keeps under one request in flight: one arrival is its steady state
    assert load_held([_req(0.0, 12.0, scheduled_s=0.0, shape="open")], 0.01, counts_streams=False,
                     scheduled=True) is None
    # 10,000 requests/s from 3 arrivals at 13 ms: 130 in flight needed
    burst = [_req(i / 10_000, 13.0, scheduled_s=i / 10_000, shape="open") for i in range(3)]
    assert load_held(burst, 10_000, counts_streams=False, scheduled=True) is not None


def test_a_pass_that_never_built_its_load_is_client_limited_and_a_miss_is_still_a_miss() -> None:
    three = [_req(0.0, 100.0), _req(0.01, 100.0), _req(0.02, 100.0)]
    p = point_stats(0, 64, three, 0.2, [parse_slo("e2e_p90=60s")], shape="closed")
    assert p.passed and p.client_limited and p.launch_lag_p99_ms is None
    assert p.client_limited_reason is not None and "for 64 streams" in p.client_limited_reason
    limit = point_limit(p, [p], [parse_slo("e2e_p90=60s")], slots=None)
    assert limit.kind == "client" and "for 64 streams" in limit.reason
    held = point_stats(0, 3, three, 0.2, [parse_slo("e2e_p90=60s")], shape="closed")
    assert held.passed and not held.client_limited and held.client_limited_reason is None
    # the same three requests missing the SLO: a miss with fewer requests than the load is a miss with more
    missed = point_stats(0, 64, three, 0.2, [parse_slo("e2e_p90=50ms")], shape="closed")
    assert not missed.passed and not missed.client_limited
    assert point_limit(missed, [missed], [parse_slo("e2e_p90=50ms")], slots=None).kind == "slo"


def test_an_open_points_rates_never_exceed_the_rate_offered() -> None:
    # One arrival at 0.01/s, over in 12 ms: over its wall alone it read 83 requests/s of goodput (the wrong answer).
    one = [_req(0.0, 12.0, scheduled_s=0.0, shape="open")]
    p = point_stats(0, 0.01, one, 0.012, [parse_slo("e2e_p90=60s")], shape="open")
    assert p.passed and p.wall_s == 100.0 and p.goodput_rps == p.requests_s == 0.01
    assert p.throughput.output_tok_s_wall is not None and p.throughput.output_tok_s_wall <= 4 * 0.01
    # a dense point's wall is longer than its arrivals ÷ rate: kept as measured
    dense = [_req(i / 100, 100.0, scheduled_s=i / 100, shape="open") for i in range(40)]
    d = point_stats(0, 100, dense, 0.49, [parse_slo("e2e_p90=60s")], shape="open")
    assert d.wall_s == 0.49 and d.goodput_rps == round(40 / 0.49, 6)
    # a closed point has no offered rate: its wall is its wall
    c = point_stats(0, 1, [_req(0.0, 12.0)], 0.012, [parse_slo("e2e_p90=60s")], shape="closed")
    assert c.wall_s == 0.012
