"""Issue 35 item 4: the range an option's help states is the range its validator takes. Every numeric or duration
option of every command shows its range; where the value goes on to a settings model or a client limit, the
command line takes no value the model then refuses (`bench --concurrency` said 1,000,000 while no bench opens more
than 1,024 streams; `capacity --requests` said 1,000,000 while a point takes at most 100,000). A value past the
range is refused where the command line is read, saying the range."""

from __future__ import annotations

import math
from collections.abc import Iterator

import annotated_types
import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from servepack.bench.config import MAX_CONCURRENCY, BenchSettings
from servepack.bench.load_settings import LoadSettings
from servepack.cli._options import Duration
from servepack.cli.main import all_commands, cli


def _options() -> Iterator[tuple[str, click.Command, click.Option]]:
    def walk(cmd: click.Command, path: list[str]) -> Iterator[tuple[str, click.Command, click.Option]]:
        if isinstance(cmd, click.Group):
            for name, sub in sorted((all_commands() if cmd is cli else cmd.commands).items()):
                yield from walk(sub, [*path, name])
            return
        for p in cmd.params:
            if isinstance(p, click.Option) and isinstance(p.type, click.types._NumberRangeBase | Duration):
                yield " ".join(path), cmd, p
    yield from walk(cli, [])


def _find(command: str, opt: str) -> click.Option:
    return next(p for name, _, p in _options() if name == command and opt in p.opts)


def _help(cmd: click.Command, p: click.Option) -> str:
    record = p.get_help_record(click.Context(cmd))
    assert record is not None
    return record[1]


def _bounds(kind: click.ParamType) -> tuple[float, float, bool]:
    """(lowest, highest, lowest excluded) the option's type takes."""
    if isinstance(kind, Duration):
        return 0.0, kind.most_s, kind.positive
    assert isinstance(kind, click.types._NumberRangeBase)
    lo = -math.inf if kind.min is None else kind.min
    return lo, math.inf if kind.max is None else kind.max, kind.min_open


def _field_bounds(model: type[BaseModel], name: str) -> tuple[float, float, bool]:
    lo, hi, lo_open = -math.inf, math.inf, False
    for m in model.model_fields[name].metadata:
        if isinstance(m, annotated_types.Ge):
            lo = float(m.ge)  # type: ignore[arg-type]
        elif isinstance(m, annotated_types.Gt):
            lo, lo_open = float(m.gt), True  # type: ignore[arg-type]
        elif isinstance(m, annotated_types.Le):
            hi = float(m.le)  # type: ignore[arg-type]
    return lo, hi, lo_open


# (command, option) → the range the value meets after the command line: a settings model's field, or a limit.
DOWNSTREAM: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("bench", "--concurrency"): (1, MAX_CONCURRENCY, False),  # bench.config: no bench opens more
    ("capacity", "--max-concurrency"): (1, MAX_CONCURRENCY, False),  # pipeline.bench.check_client_limits
    **{("bench", opt): _field_bounds(BenchSettings, name) for opt, name in (
        ("--gen-tokens", "gen_tokens"), ("--samples", "samples"), ("--warmup", "warmup"), ("--timeout", "timeout_s"))},
    **{("capacity", opt): _field_bounds(LoadSettings, name) for opt, name in (
        ("--requests", "max_requests"), ("--duration", "duration_s"), ("--turns", "turns"),
        ("--client-workers", "workers"), ("--client-lag-bound", "client_lag_bound_ms"), ("--timeout", "timeout_s"),
        ("--prompt-tokens", "prompt_tokens"), ("--gen-tokens", "gen_tokens"))},
}


def mismatches() -> list[str]:
    """One line per option whose help does not state its type's range, or whose range lets through a value the
    validator after it refuses."""
    out = []
    for command, cmd, p in _options():
        shown = _help(cmd, p)
        said = p.type.range_text if isinstance(p.type, Duration) else p.type._describe_range()  # type: ignore[union-attr]
        if said not in shown:
            out.append(f"{command} {p.opts[0]}: help {shown!r} does not state {said!r}")
        want = DOWNSTREAM.get((command, p.opts[0]))
        if want is not None:
            lo, hi, lo_open = _bounds(p.type)
            wlo, whi, wlo_open = want
            if hi > whi or lo < wlo or (lo == wlo and wlo_open and not lo_open):
                out.append(f"{command} {p.opts[0]}: takes {lo:g}..{hi:g}, the validator after it {wlo:g}..{whi:g}")
    return out


def test_every_range_in_a_help_is_the_range_its_validator_takes() -> None:
    assert len(list(_options())) > 30  # the walk reaches the commands: a broken walk would find none and pass
    assert mismatches() == []


def test_the_check_fails_on_a_help_wider_than_its_validator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrong answers: the old --concurrency (1,000,000), a --requests wider than a point takes, a duration
    whose help says another range."""
    monkeypatch.setattr(_find("bench", "--concurrency"), "type", click.IntRange(min=1, max=1_000_000))
    monkeypatch.setattr(_find("capacity", "--requests"), "type", click.IntRange(min=1, max=1_000_000))
    monkeypatch.setattr(_find("capacity", "--duration"), "type", Duration(7 * 86400.0, positive=True))
    found = mismatches()
    assert any(line.startswith("bench --concurrency: takes 1..1e+06") for line in found), found
    assert any(line.startswith("capacity --requests: takes 1..1e+06") for line in found), found
    assert any(line.startswith("capacity --duration: help") for line in found), found


@pytest.mark.parametrize(("args", "words"), [
    (["bench", "--concurrency", "1025"], "1025 is not in the range 1<=x<=1024"),
    (["bench", "--concurrency", "0"], "0 is not in the range 1<=x<=1024"),
    (["bench", "--timeout", "1e300"], "is not in the range"),
    (["bench", "--timeout", "nan"], "not a finite number"),
    (["bench", "--wait-quiet", "1e300s"], "'1e300s' is out of range: 0 to 1 hour"),
    (["bench", "--wait-quiet", "-5s"], "'-5s' is out of range: 0 to 1 hour"),
    (["run", "--wait-quiet", "inf"], "'inf' is out of range: 0 to 1 hour"),
    (["capacity", "--slo", "ttft_p90=2s", "--requests", "100001"], "100001 is not in the range 1<=x<=100000"),
    (["capacity", "--slo", "ttft_p90=2s", "--duration", "0"], "'0' is out of range: more than 0 to 1 hour"),
    (["capacity", "--slo", "ttft_p90=2s", "--max-concurrency", "5000"], "5000 is not in the range 1<=x<=1024"),
    (["tune", "--budget-time", "8d"], "not a duration"),
    (["tune", "--budget-time", "169h"], "'169h' is out of range: more than 0 to 1 week"),
])
def test_a_value_past_the_range_is_refused_where_the_command_line_is_read(args: list[str], words: str) -> None:
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize(("slo", "words"), [
    ("ttft_p90=1e300s", "1e300s is out of range: ttft takes more than 0 to 86,400 s (a day)"),
    ("ttft_p90=0", "0 is out of range: ttft takes more than 0 to 86,400 s"),
    ("ttft_p90=-1s", "-1s is out of range"),
    ("e2e_p50=90000s", "90000s is out of range"),
    ("decode_p10=1e8", "1e8 is out of range: decode takes more than 0 to 10,000,000 tok/s"),
    ("decode_p10=inf", "inf is out of range"),
    ("decode_p10=nan", "nan is out of range"),
    ("ttft_p90=2x", "not an SLO"),  # a syntax error stays one
    ("ttft_p90=1e3s", None),  # in range, with an exponent
])
def test_an_slo_bound_out_of_range_says_so_with_the_range(slo: str, words: str | None) -> None:
    from servepack.bench.capacity import parse_slo
    from servepack.errors import UsageError

    if words is None:
        assert parse_slo(slo).bound == 1_000_000.0
        return
    with pytest.raises(UsageError) as info:
        parse_slo(slo)
    assert words in str(info.value) and "\n" not in str(info.value)

