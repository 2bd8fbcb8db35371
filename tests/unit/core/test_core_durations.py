"""The one duration grammar (settings.parse_duration), used by --wait-quiet (0 to 1 hour, through
host.contention's name for it) and --budget-time (more than 0, at most a week, in tune's own words)."""

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
    with pytest.raises(UsageError, match=r"^--budget-time '0': must be more than 0 and at most a week$"):
        budget_time("0")


def test_the_upper_bound_is_the_callers() -> None:
    assert parse_duration("1h") == 3600.0
    with pytest.raises(DurationError, match=r"'61m' is out of range: 0 to 1 hour"):
        parse_duration("61m")
    assert budget_time("61m") == 3660.0 and budget_time("168h") == WEEK_S  # a week is tune's bound, not an hour
    with pytest.raises(UsageError, match=r"^--budget-time '169h': must be more than 0 and at most a week$"):
        budget_time("169h")


def test_not_a_duration_is_told_apart_from_out_of_range() -> None:
    with pytest.raises(DurationError, match=r"'soon' is not a duration \(e\.g\. 60s, 2m, 0\)") as caught:
        parse_duration("soon")
    assert not caught.value.out_of_range and isinstance(caught.value, ValueError)
    with pytest.raises(UsageError, match=r"^--budget-time 'soon': give a duration such as 600, 90s, 30m or 1\.5h$"):
        budget_time("soon")
