"""Values no command can use are refused where the command line is read (`cli._options.require_values`), for every
string and path parameter of every command: an empty value (`--out ""` wrote a tune, a capacity sweep or a
reproduction into the current directory, `registry import ""` imported it, `PACK ""` meant the default pack,
`--db ""` was an internal error) and a path longer than a filesystem takes. A reference that is a file or else a
name (a pack, a record id, a case) too long to be a path is looked up as a name (`safepath.names_something`), not
an internal error. One line, exit 2, nothing written; every file in scratch directories.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from servepack.cli.main import all_commands, cli
from servepack.safepath import names_something

LONG = "a" * 300  # one name over 255 bytes


def _params() -> Iterator[tuple[list[str], click.Parameter]]:
    def walk(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Parameter]]:
        if isinstance(cmd, click.Group):
            for name, sub in sorted((all_commands() if cmd is cli else cmd.commands).items()):
                yield from walk(sub, [*path, name])
            return
        for p in cmd.params:
            if isinstance(p.type, click.types.StringParamType | click.Path):
                yield path, p
    yield from walk(cli, [])


PARAMS = list(_params())


def _argv(path: list[str], param: click.Parameter, value: str, scratch: Path) -> list[str]:
    """The command with `value` for `param`; an argument after the first gets existing folders before it."""
    if isinstance(param, click.Option):
        return [*path, param.opts[0], value]
    cmd: click.Command = all_commands()[path[0]]
    for name in path[1:]:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    args = [p for p in cmd.params if isinstance(p, click.Argument)]
    return [*path, *[str(scratch)] * args.index(param), value]


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SERVEPACK_RESULTS_DIR", str(tmp_path / "results"))
    return work


def test_every_string_and_path_parameter_is_covered() -> None:
    names = {(" ".join(path), p.name) for path, p in PARAMS}
    assert len(PARAMS) > 100 and {("registry import", "paths"), ("registry list", "db"), ("reproduce", "pack"),
                                  ("tune", "out"), ("capacity", "out"), ("worker", "rpc_server")} <= names
    assert all(type(p.type).__name__.startswith("Given") for _, p in PARAMS), [
        (" ".join(path), p.name) for path, p in PARAMS if not type(p.type).__name__.startswith("Given")]


@pytest.mark.parametrize(("path", "param"), PARAMS, ids=[f"{' '.join(p)} {q.name}" for p, q in PARAMS])
def test_an_empty_value_is_refused_in_one_line(scratch: Path, path: list[str], param: click.Parameter) -> None:
    result = CliRunner().invoke(cli, _argv(path, param, "", scratch))
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert "an empty value; give one, or leave the option out" in result.stderr, result.stderr
    assert sorted(p.name for p in scratch.parent.rglob("*")) == ["cwd"]  # no cache, no results, nothing in cwd


@pytest.mark.parametrize("argv", [
    ["registry", "import", ""], ["registry", "list", "--db", ""], ["tune", "--out", ""],
    ["reproduce", "x", "", "--dry-run"], ["capacity", "", "--slo", "ttft_p90=1s"], ["worker", "--rpc-server", ""],
])
def test_the_empty_values_found_before_are_refused_before_anything_runs(scratch: Path, argv: list[str]) -> None:
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2 and "an empty value" in result.stderr, result.output
    assert sorted(p.name for p in scratch.parent.rglob("*")) == ["cwd"]


@pytest.mark.parametrize(("path", "param"), [(p, q) for p, q in PARAMS if isinstance(q.type, click.Path)],
                         ids=[f"{' '.join(p)} {q.name}" for p, q in PARAMS if isinstance(q.type, click.Path)])
def test_a_path_no_filesystem_takes_is_refused_in_one_line(scratch: Path, path: list[str],
                                                          param: click.Parameter) -> None:
    for value in (str(scratch / LONG), "d/" * 2100):
        result = CliRunner().invoke(cli, _argv(path, param, value, scratch))
        assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
        assert "a path longer than a filesystem takes (255 bytes a name, 4,095 in all)" in result.stderr
    try:  # 255 bytes is a name a filesystem takes (the type's own checks may still refuse it: it does not exist)
        param.type.convert(str(scratch / ("b" * 255)), param, None)
    except click.BadParameter as exc:
        assert "a path longer" not in exc.message


@pytest.mark.parametrize(("argv", "first"), [
    (["registry", "show", LONG], f"servepack: error: {LONG}: no such file, and no registry database"),
    (["reproduce", LONG, "--dry-run"], f"servepack: error: {LONG}: no such file, and no registry database"),
    (["pack", "show", LONG], f"servepack: error: no pack '{LONG}'"),
    (["tune", LONG], f"servepack: error: no pack '{LONG}'"),
    (["smoke", "score", "--case", LONG, "--response", "r.json"], f"servepack: error: --case {LONG}"),
])
def test_a_reference_too_long_for_a_path_is_looked_up_as_a_name(scratch: Path, argv: list[str], first: str) -> None:
    """Path.exists raised ENAMETOOLONG here: `servepack: internal error: OSError`, exit 70, before."""
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith(first), result.stderr


def test_compare_with_a_candidate_too_long_for_a_path(scratch: Path) -> None:
    run = scratch.parent / "run"
    run.mkdir()
    result = CliRunner().invoke(cli, ["compare", str(run), LONG])
    assert result.exit_code == 2 and result.stderr.startswith(f"servepack: error: {LONG}: no such file"), result.output


def test_names_something(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "inside").write_text("x")
    assert names_something(tmp_path / "f") and names_something(tmp_path / "dangling") and names_something(tmp_path)
    assert not names_something(tmp_path / "absent") and not names_something(tmp_path / "f" / "under-a-file")
    assert not names_something(tmp_path / LONG) and not names_something(Path("a\0b"))
    with pytest.raises(OSError):
        (tmp_path / LONG).exists()  # what it replaces
    if os.geteuid() != 0:
        locked.chmod(0)
        try:
            assert names_something(locked / "inside")  # cannot be looked at: its reader says why
        finally:
            locked.chmod(0o755)
