"""Order statistics and the seeded bootstrap."""

from __future__ import annotations

import pytest

from servepack.bench.stats import (
    Stat,
    bootstrap_median_ci,
    describe,
    interval_report,
    keep_sampling,
    median,
    quantile,
)


def test_quantile_interpolates_like_numpy() -> None:
    data = [1.0, 2.0, 3.0, 4.0]
    assert quantile(data, 0.5) == 2.5
    assert quantile(data, 0.1) == pytest.approx(1.3)
    assert quantile(data, 0.9) == pytest.approx(3.7)


def test_describe_values_and_no_p99_below_100() -> None:
    s = describe([5.0, 1.0, 3.0, None, 2.0, 4.0])
    assert (s.n, s.median, s.min, s.max) == (5, 3.0, 1.0, 5.0)
    assert s.p10 == pytest.approx(1.4) and s.p90 == pytest.approx(4.6)
    assert s.p99 is None
    assert s.ci95_low is not None and s.ci95_high is not None
    assert 1.0 <= s.ci95_low <= 3.0 <= s.ci95_high <= 5.0


def test_p99_from_100_samples() -> None:
    s = describe([float(i) for i in range(100)])
    assert s.p99 == pytest.approx(98.01)


def test_bootstrap_is_deterministic_and_seed_dependent() -> None:
    data = [10.0 + (i * 7919 % 101) / 10 for i in range(40)]
    a = bootstrap_median_ci(data)
    assert a == bootstrap_median_ci(data)
    assert {bootstrap_median_ci(data, seed=s) for s in (1, 2, 3)} != {a}
    assert a[0] < median(data) < a[1]


def test_empty_and_single() -> None:
    assert describe([]).n == 0 and describe([]).median is None
    one = describe([7.0])
    assert (one.median, one.ci95_low, one.ci95_high) == (7.0, None, None)
    assert one.ci_note == "too few for an interval (n=1 < 5)"


def test_fewer_than_five_is_too_few_for_an_interval_never_min_max() -> None:
    # The case: 3 samples printed as a "95% interval" of 2.72–28.57 (their min and max).
    three = describe([2.72, 4.25, 28.57])
    assert three.ci95_low is None and three.ci95_high is None
    assert three.interval_text() == "too few for an interval (n=3 < 5)"
    assert "2.72–28.57" not in three.interval_text() and "95%" not in three.interval_text()
    four = describe([30.0, 31.0, 32.0, 33.0])
    assert four.ci95_low is None and four.interval_text().startswith("too few for an interval (n=4")


def test_five_or_more_give_an_interval_with_its_width() -> None:
    five = describe([31.8, 32.0, 32.1, 32.2, 32.5])
    assert five.ci95_low is not None and five.ci95_high is not None and five.ci_note is None
    text = five.interval_text()
    assert text.startswith("95% CI 31.") and "(±" in text
    hw = five.half_width_pct
    assert hw is not None and 0 < hw < 2


def _stat(values: list[float]) -> Stat:
    return describe(values)


def test_sequential_rule_takes_the_minimum_first() -> None:
    tight = _stat([32.0] * 5)
    assert keep_sampling(tight, target_pct=3, rounds=2, min_rounds=3, max_rounds=20, elapsed_s=0, max_s=100) is None


def test_sequential_rule_stops_when_the_interval_is_within_target() -> None:
    tight = _stat([32.0, 32.1, 31.9, 32.05, 31.95])
    assert keep_sampling(tight, target_pct=3, rounds=5, min_rounds=3, max_rounds=20, elapsed_s=10,
                         max_s=100) == "target met"


def test_sequential_rule_needs_five_samples_even_when_three_agree() -> None:
    three = _stat([32.0, 32.0, 32.0])
    assert keep_sampling(three, target_pct=3, rounds=3, min_rounds=3, max_rounds=20, elapsed_s=5, max_s=100) is None


def test_sequential_rule_continues_while_wide_and_stops_at_the_caps() -> None:
    wide = _stat([4.25, 30.0, 12.0, 28.0, 6.0, 31.0])
    assert keep_sampling(wide, target_pct=3, rounds=6, min_rounds=3, max_rounds=20, elapsed_s=10, max_s=100) is None
    assert keep_sampling(wide, target_pct=3, rounds=20, min_rounds=3, max_rounds=20, elapsed_s=10,
                         max_s=100) == "max samples"
    assert keep_sampling(wide, target_pct=3, rounds=6, min_rounds=3, max_rounds=20, elapsed_s=100,
                         max_s=100) == "max time"


def test_sequential_rule_off_is_a_fixed_count() -> None:
    wide = _stat([4.25, 30.0, 12.0])
    assert keep_sampling(wide, target_pct=None, rounds=3, min_rounds=3, max_rounds=20, elapsed_s=0,
                         max_s=100) == "fixed count"
    assert keep_sampling(wide, target_pct=3, rounds=3, min_rounds=3, max_rounds=3, elapsed_s=0,
                         max_s=100) == "fixed count"
    assert keep_sampling(describe([]), target_pct=3, rounds=3, min_rounds=3, max_rounds=20, elapsed_s=0,
                         max_s=100) == "no metric samples"


def test_interval_report_wording() -> None:
    met = interval_report(_stat([32.0, 32.1, 31.9, 32.05, 31.95]), "decode_tok_s_server", 3.0, "target met")
    assert met.met and met.half_width_pct is not None and met.half_width_pct <= 3
    assert met.note.startswith("±0.") and met.note.endswith("from 5 samples (target ±3%); stopped: target met")
    few = interval_report(_stat([2.72, 4.25, 28.57]), "decode_tok_s_server", 3.0, "fixed count")
    assert not few.met and few.half_width_pct is None
    assert few.note == "too few for an interval (n=3 < 5) (target ±3%); stopped: fixed count"
    wide = interval_report(_stat([4.25, 30.0, 12.0, 28.0, 6.0, 31.0]), "decode_tok_s_server", 3.0, "max time")
    assert not wide.met and "target ±3% not met" in wide.note

