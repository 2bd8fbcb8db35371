"""`--wait-quiet DURATION` on run and bench: bad durations are one-line exit-2 errors; good ones reach the job."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli


@pytest.mark.parametrize("command", ["run", "bench"])
@pytest.mark.parametrize(("value", "why"), [("soon", "is not a duration"), ("-5s", "out of range"),
                                            ("2h", "out of range"), ("nan", "out of range")])
def test_bad_wait_quiet_is_refused_when_parsed(command: str, value: str, why: str) -> None:
    result = CliRunner().invoke(cli, [command, "--wait-quiet", value])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2
    assert "Invalid value for '--wait-quiet'" in result.stderr and why in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("value", "seconds"), [("60s", 60.0), ("2m", 120.0), ("0", 0.0), ("45", 45.0)])
def test_wait_quiet_reaches_run_pack(monkeypatch: pytest.MonkeyPatch, value: str, seconds: float) -> None:
    seen: dict[str, Any] = {}

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr("servepack.pipeline.run_pack", stand_in)  # where `run` looks it up when it runs
    result = CliRunner().invoke(cli, ["run", "--wait-quiet", value])
    assert result.exit_code == 0, result.output
    assert seen["wait_quiet_s"] == seconds


def test_wait_quiet_defaults_to_no_wait_on_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr("servepack.pipeline.bench.bench_pack", stand_in)  # where `bench` looks it up
    assert CliRunner().invoke(cli, ["bench"]).exit_code == 0
    assert seen["wait_quiet_s"] == 0.0
