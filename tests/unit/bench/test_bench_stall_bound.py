"""The stall bound: derived from the cell's own gaps, never below its floor."""

from __future__ import annotations

import pytest

from servepack.bench.client import StallBound


def _events(times: list[float]) -> list[tuple[float, bytes]]:
    return [(t, b"x") for t in times]


def test_gap_bound_is_factor_times_the_cells_p90_gap_when_above_the_floor() -> None:
    b = StallBound(floor_s=2.0, factor=10.0, gap_ref_s=0.5)
    assert b.gap_s([]) == pytest.approx(5.0)


def test_gap_bound_never_below_the_floor() -> None:
    b = StallBound(floor_s=2.0, factor=10.0, gap_ref_s=0.03)  # 30 ms gaps: 10 × = 0.3 s < floor
    assert b.gap_s([]) == 2.0


def test_without_earlier_gaps_the_streams_own_median_gap_is_used() -> None:
    b = StallBound(floor_s=0.1, factor=10.0)
    # role chunk at 0.5, then tokens every 40 ms (the first gap after the role chunk is not a token gap)
    own = _events([0.5, 0.9, 0.94, 0.98, 1.02])
    assert b.gap_s(own) == pytest.approx(0.4)


def test_nothing_known_means_the_absolute_floor() -> None:
    """An inter-token gap beyond the floor is a stall even when nothing earlier is known (not 30 s, as it was)."""
    b = StallBound(floor_s=2.0, factor=10.0)
    assert b.gap_s(_events([0.5, 0.6])) == 2.0
    assert StallBound(floor_s=60.0).gap_s([]) == 60.0


def test_first_event_bound_from_the_cells_slowest_first_event() -> None:
    assert StallBound(floor_s=2.0, factor=10.0, first_ref_s=0.8).first_s() == pytest.approx(8.0)
    assert StallBound(floor_s=2.0, factor=10.0, first_ref_s=0.05).first_s() == 2.0
    assert StallBound(floor_s=2.0, factor=10.0).first_s() is None  # unknown: only the per-request timeout


def test_describe_names_floor_and_reference() -> None:
    b = StallBound(floor_s=2.0, factor=10.0, gap_ref_s=0.012)
    assert b.describe(2.0, "gap") == "max(floor 2 s, 10 × p90 gap 12 ms)"
    assert "slowest first event" in b.describe(2.0, "first")


def test_a_sample_on_an_unwatched_host_is_neither_quiet_nor_contended() -> None:
    from servepack.bench.client import StreamExchange
    from servepack.bench.sample import build_sample
    from servepack.host.contention import HostReading

    blind = HostReading(window_s=1.0, others_cores=None, others_share=None, own_cores=None, contended=False)
    seen = HostReading(window_s=1.0, others_cores=0.01, others_share=0.005, own_cores=1.0, contended=False)
    ex = StreamExchange(t_sent_unix=1.0, status=200, end_s=0.1)
    kw = dict(context_tokens=8, concurrency=1, round_=0, stream=0, warmup=False, nonce="n",
              endpoint_prompt_tokens=8, exact=True, gen_tokens=4)
    assert build_sample(ex, "chat", host=blind, **kw).contended is None  # type: ignore[arg-type]
    assert build_sample(ex, "chat", host=seen, **kw).contended is False  # type: ignore[arg-type]


def test_the_stall_floor_is_pack_settable() -> None:
    from servepack.bench.config import BenchSettings
    from servepack.packs.schema import BenchPlan, ClaimsPolicy, Headline

    claims = ClaimsPolicy(headline=Headline(metric="decode_tok_s", preset="p", context_tokens=64, gen_tokens=8))
    assert BenchSettings.from_plan(BenchPlan(preset="p", context_marks=[64]), claims).stall_floor_s == 5.0
    plan = BenchPlan(preset="p", context_marks=[64], stall_floor_s=2.0)
    assert BenchSettings.from_plan(plan, claims).stall_floor_s == 2.0
    with pytest.raises(ValueError):
        BenchPlan(preset="p", context_marks=[64], stall_floor_s=0)
