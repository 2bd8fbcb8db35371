"""Exit codes the CLI promises: 2 for bad input, 130 for Ctrl-C, 70 with a --debug hint for a bug (and 70 with the
traceback under --debug)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import servepack.pipeline as run_cli  # where `run` looks up run_pack when it runs
from servepack.cli.main import cli
from servepack.engine.locate import locate_binary
from servepack.errors import UsageError
from servepack.packs import load_pack
from servepack.settings import Settings


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cli, "run_pack", interrupted)
    r = CliRunner().invoke(cli, ["run"])
    assert r.exit_code == 130 and "interrupted" in r.output


def test_an_unknown_error_exits_70_and_hints_at_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(run_cli, "run_pack", broken)
    r = CliRunner().invoke(cli, ["run"])
    assert r.exit_code == 70 and "ZeroDivisionError: division by zero" in r.output and "--debug" in r.output
    r = CliRunner().invoke(cli, ["--debug", "run"])  # the traceback, through the one redaction, then exit 70
    assert r.exit_code == 70 and "Traceback (most recent call last)" in r.output
    assert r.output.rstrip().endswith("ZeroDivisionError: division by zero") and "--debug …" not in r.output


@pytest.mark.parametrize("value", ["abc", "-5", "0", "nan", "inf"])
def test_health_timeout_must_be_positive_seconds(value: str) -> None:
    with pytest.raises(UsageError, match=f"SERVEPACK_HEALTH_TIMEOUT_S={value!r}: must be a positive number"):
        Settings.load({"SERVEPACK_HEALTH_TIMEOUT_S": value})
    assert Settings.load({"SERVEPACK_HEALTH_TIMEOUT_S": "2.5"}).health_timeout_s == 2.5


def test_a_binary_named_by_the_environment_is_recorded_as_env(fake_server_bin: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pin = load_pack(None).pack.engine
    monkeypatch.setenv("SERVEPACK_LLAMA_SERVER", str(fake_server_bin))
    assert locate_binary("llama-server", pin).chosen_by == "env"
    assert locate_binary("llama-server", pin, fake_server_bin).chosen_by == "flag"
