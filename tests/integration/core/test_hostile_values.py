"""Issue 35: no input reaches an internal error (rc 70). Every option that takes a value, of the commands that start
a server (bench, run, smoke, capacity), is given each hostile value below, alone; the command must end in one line
naming the problem (exit 2), or reach the session, which stands in here and stops it (exit 2, "reached"): never a
traceback, never rc 70. The count per command goes into the issue note (`HOSTILE_PER_COMMAND`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import click
import pytest
from click.testing import CliRunner

from servepack.cli.main import all_commands, cli
from servepack.errors import UsageError

COMMANDS = ["bench", "run", "smoke", "capacity"]
NUMBERS = ["0", "-1", "nan", "inf", "-inf", "1e309", "1e300", "99999999999999999999999", "0x10", "1_000",
           "\u0661\u0660", " ", "-", "--", "1e300s", "ttft_p90=1e300s"]
TEXTS = ["", "\x00", "a" * 5000, "\x1b[2J", "nosuch", "../x", "-", "--", "ttft_p90=nan", "ttft_p90=-1s", "x=y=z"]
REACHED = "reached the session: every input before it was accepted"


def _reached(*_a: Any, **_k: Any) -> NoReturn:
    raise UsageError(REACHED)


def _value_options(command: str) -> Iterator[click.Option]:
    cmd = all_commands()[command]
    if isinstance(cmd, click.Group):
        cmd = cmd.commands["run"]
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.is_flag and p.expose_value is not False and \
                not isinstance(p.type, click.Choice):
            yield p


def _values(p: click.Option, scratch: Path) -> list[str]:
    if isinstance(p.type, click.Path):
        fifo = scratch / "pipe"
        if not fifo.exists():
            os.mkfifo(fifo)
        return [*TEXTS, str(fifo), str(scratch), str(scratch / "absent" / "deeper"), "/dev/null"
                if p.name not in ("out", "db") else str(scratch / "f")]
    return NUMBERS if isinstance(p.type, click.types._NumberRangeBase) or p.type.name == "duration" else TEXTS


HOSTILE_PER_COMMAND: dict[str, int] = {}


@pytest.mark.parametrize("command", COMMANDS)
def test_no_hostile_value_reaches_an_internal_error(command: str, tmp_path: Path, tiny_pack: Path,
                                                    fake_server_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for where in ("bench", "run", "smoke", "capacity"):
        monkeypatch.setattr(f"servepack.pipeline.{where}.open_session", _reached)
    for where in ("bench", "smoke", "capacity"):
        monkeypatch.setattr(f"servepack.pipeline.{where}.attach", _reached)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "f").write_text("a file, never a results folder\n")
    monkeypatch.chdir(scratch)
    base = [command, str(tiny_pack), "--server-bin", str(fake_server_bin)]
    if command == "capacity":
        base += ["--slo", "ttft_p90=2s"]
    tried, bad = 0, []
    for p in _value_options(command):
        for value in _values(p, scratch):
            args = [*base, p.opts[0], value]
            if command == "capacity" and p.name == "slos":
                args = [command, str(tiny_pack), "--server-bin", str(fake_server_bin), "--slo", value]
            r = CliRunner().invoke(cli, args)
            tried += 1
            err = r.stderr
            if r.exit_code != 2 or err.count("servepack: error:") != 1 or "internal error" in err:
                bad.append(f"{p.opts[0]} {value[:40]!r}: rc {r.exit_code}: {err.strip()[-160:]}")
    HOSTILE_PER_COMMAND[command] = tried
    assert bad == [], "\n".join(bad)
    assert tried > 50  # the walk found the options: a broken one would try nothing and pass
    assert not (scratch / "f").read_text() != "a file, never a results folder\n"
