"""The one duration grammar (settings.parse_duration), used by --wait-quiet (0 to 1 hour, through
host.contention's name for it) and --budget-time (more than 0 to 1 week); a number outside the range is "out of
range" with the range, whatever its spelling (1e300s, -5m, inf), and only ASCII numbers are durations."""

from __future__ import annotations

import pytest

from servepack.cli.tune import parse_duration as budget_time
from servepack.errors import UsageError
from servepack.host.contention import parse_duration as wait_quiet
from servepack.settings import WEEK_S, DurationError, parse_duration


def test_both_options_read_durations_through_the_one_grammar() -> None:
    assert wait_quiet is parse_duration  # contention's name is the same function, not a copy
    for text, seconds in (("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("0.5h", 1800.0), ("500ms", 0.5),
                          (" 10S ", 10.0)):
        assert parse_duration(text) == seconds
        assert budget_time(text) == seconds  # --budget-time reads the same spellings to the same seconds


def test_zero_is_a_duration_unless_it_must_be_positive() -> None:
    assert parse_duration("0") == 0.0  # --wait-quiet 0: do not wait
    with pytest.raises(DurationError, match=r"'0' is out of range: more than 0 to 1 week") as caught:
        parse_duration("0", most_s=WEEK_S, positive=True)
    assert caught.value.out_of_range
    with pytest.raises(UsageError, match=r"^--budget-time '0' is out of range: more than 0 to 1 week$"):
        budget_time("0")


def test_the_upper_bound_is_the_callers() -> None:
    assert parse_duration("1h") == 3600.0
    with pytest.raises(DurationError, match=r"'61m' is out of range: 0 to 1 hour"):
        parse_duration("61m")
    assert budget_time("61m") == 3660.0 and budget_time("168h") == WEEK_S  # a week is tune's bound, not an hour
    with pytest.raises(UsageError, match=r"^--budget-time '169h' is out of range: more than 0 to 1 week$"):
        budget_time("169h")


def test_not_a_duration_is_told_apart_from_out_of_range() -> None:
    with pytest.raises(DurationError, match=r"'soon' is not a duration \(e\.g\. 60s, 2m, 0\)") as caught:
        parse_duration("soon")
    assert not caught.value.out_of_range and isinstance(caught.value, ValueError)
    with pytest.raises(UsageError, match=r"^--budget-time 'soon' is not a duration \(e\.g\. 60s, 2m, 0\)$"):
        budget_time("soon")


@pytest.mark.parametrize("text", ["1e300s", "1e300", "-5m", "-0.5", "inf", "nan", "1e999h", "+9999h", "3.7e3s"])
def test_a_number_outside_the_range_is_out_of_range_with_the_range(text: str) -> None:
    with pytest.raises(DurationError, match=r"is out of range: 0 to 1 hour$") as caught:
        parse_duration(text)
    assert caught.value.out_of_range  # never "not a duration": it is a number, only too big or below 0


@pytest.mark.parametrize("text", ["1_000", "\u0661\u0660s", "0x10", "1e", "e5", "--5", "5 s s", "ms", "-"])
def test_only_ascii_numbers_are_durations(text: str) -> None:
    """float() alone takes '1_000' and Arabic-Indic digits: the wrong answers this refuses."""
    with pytest.raises(DurationError, match="is not a duration") as caught:
        parse_duration(text)
    assert not caught.value.out_of_range


def test_exponents_and_signs_in_range_are_read() -> None:
    assert parse_duration("1e3s") == 1000.0 and parse_duration("+5m") == 300.0 and parse_duration(".5h") == 1800.0
