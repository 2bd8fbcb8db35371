"""Every numeric option of every command, walked from the click tree, against extreme values: each is refused at
parse time in one line with exit 2 (no traceback, no exit 70), or is a value inside the option's declared, finite
range. A new numeric option without an upper bound fails `test_every_numeric_option_has_a_finite_range`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner

from servepack.cli._options import Duration
from servepack.cli.main import all_commands, cli

EXTREMES = ["1e30", "-1", "0", str(2**63), str(2**64 + 1), "nan", "inf", "-inf", "1" + "0" * 400, "0x10", ""]
NUMERIC = (click.types.IntParamType, click.types.FloatParamType, Duration)


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted((all_commands() if group is cli else group.commands).items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _numeric_options() -> list[tuple[tuple[str, ...], click.Option]]:
    return [(path, p) for path, command in _commands() for p in command.params
            if isinstance(p, click.Option) and isinstance(p.type, NUMERIC)]


OPTIONS = _numeric_options()
CASES = [(path, opt, value) for path, opt in OPTIONS for value in EXTREMES]


def _accepts(option: click.Option, value: str) -> Any:
    """The converted value, or None when the option's type refuses it."""
    try:
        return option.type.convert(value, option, None)
    except click.BadParameter:
        return None


def test_the_walk_finds_the_numeric_options_of_every_command_group() -> None:
    found = {(" ".join(path), opt.opts[-1]) for path, opt in OPTIONS}
    for expected in [("registry list", "--context"), ("registry choose", "--context"), ("bench", "--timeout"),
                     ("capacity", "--seed"), ("capacity", "--duration"), ("tune", "--budget-trials"),
                     ("twin", "--seed"), ("worker", "--threads"), ("smoke run", "--temperature"),
                     ("reproduce", "--tolerance"), ("serve", "--port"), ("engine build", "--jobs")]:
        assert expected in found
    assert len(OPTIONS) >= 40


@pytest.mark.parametrize(("path", "option"), OPTIONS, ids=[f"{' '.join(p)} {o.opts[-1]}" for p, o in OPTIONS])
def test_every_numeric_option_has_a_finite_range(path: tuple[str, ...], option: click.Option) -> None:
    t = option.type
    if isinstance(t, Duration):  # its most, and not a second more
        assert _accepts(option, f"{t.most_s:g}") == t.most_s and _accepts(option, f"{t.most_s + 1:g}") is None
        return
    assert isinstance(t, click.IntRange | click.FloatRange), f"{t!r} has no range"
    assert t.min is not None and t.max is not None, f"{' '.join(path)} {option.opts[-1]}: {t!r} is open"
    assert math.isfinite(t.max) and t.max <= 2**53
    if isinstance(t, click.FloatRange):
        assert t.name == "finite float", "nan compares false with every bound: use FiniteFloat"


@pytest.mark.parametrize(("path", "option", "value"), CASES,
                         ids=[f"{' '.join(p)} {o.opts[-1]} {v[:8] or 'empty'}" for p, o, v in CASES])
def test_an_extreme_value_is_refused_in_one_line_or_lies_in_range(path: tuple[str, ...], option: click.Option,
                                                                  value: str) -> None:
    accepted = _accepts(option, value)
    if accepted is not None:  # valid: the documented behaviour is a number inside the declared range
        t = option.type
        low, high = (0.0, t.most_s) if isinstance(t, Duration) else (t.min, t.max)  # type: ignore[attr-defined]
        assert math.isfinite(accepted) and low <= accepted <= high, (value, accepted)
        assert value in ("0", "-1", "0x10") or accepted == float(value)
        return
    result = CliRunner().invoke(cli, [*path, option.opts[-1], value], prog_name="servepack")
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"servepack: error: Invalid value for '{option.opts[-1]}'") or \
        lines[0].startswith(f"servepack: error: Invalid value for '{option.opts[0]}'"), lines[0]
    assert lines[0].endswith(f"(see `servepack {' '.join(path)} --help`)") and "Traceback" not in result.output


@pytest.mark.parametrize(("args", "words"), [
    (["registry", "list", "--context", str(10**30)], "is not in the range 1<=x<=16777216"),
    (["registry", "choose", "m", "--context", str(2**63)], "is not in the range 1<=x<=16777216"),
    (["capacity", "--seed", "-1"], "is not in the range 0<=x<=4294967295"),
    (["tune", "--budget-time", "1" + "0" * 400], "--budget-time"),
    (["tune", "--budget-time", "nan"], "--budget-time"),
    (["capacity", "--slo", "ttft_p90=" + "9" * 400], "is out of range: ttft takes more than 0 to 86,400 s"),
    (["capacity", "--slo", "ttft_p90=nan"], "nan is out of range"),  # a number, not a syntax error
])
def test_numbers_hidden_in_text_options_and_huge_ranges_are_one_line(args: list[str], words: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("servepack: error: "), result.stderr


def test_a_usage_error_at_the_top_is_one_line_too() -> None:
    for args, words in ((["--bogus"], "No such option '--bogus'"), (["no-such-command"], "No such command"),
                        (["smoke", "score"], "smoke score needs --case and --response")):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
            f"servepack: error: {words}" + result.stderr.strip().split(words, 1)[1]], result.stderr
        assert "Usage:" not in result.output
