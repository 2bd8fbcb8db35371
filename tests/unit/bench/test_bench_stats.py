"""Order statistics and the seeded bootstrap."""

from __future__ import annotations

import pytest

from servepack.bench.stats import bootstrap_median_ci, describe, median, quantile


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
    assert (one.median, one.ci95_low, one.ci95_high) == (7.0, 7.0, 7.0)
