"""`servepack --version` and `--help` import no command module: `cli.main.COMMAND_TABLE` names each top-level command's
modules and summary, and must say what the modules themselves define."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

import servepack.cli
from servepack.cli.main import COMMAND_TABLE, cli, load_command


def _defined() -> dict[str, tuple[str, click.Command]]:
    found: dict[str, tuple[str, click.Command]] = {}
    for info in pkgutil.iter_modules(servepack.cli.__path__):
        if info.name in {"main", "render"} or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"servepack.cli.{info.name}")
        for command in getattr(module, "COMMANDS", []):
            assert command.name not in found, f"{command.name} defined twice"
            found[command.name] = (info.name, command)
    return found


def test_the_table_names_every_command_its_module_and_its_summary() -> None:
    defined = _defined()
    assert sorted(COMMAND_TABLE) == sorted(defined)
    for name, (module, command) in defined.items():
        modules, summary = COMMAND_TABLE[name]
        assert module in modules, name
        assert summary == command.get_short_help_str(100_000), name


def test_a_loaded_command_is_the_modules_own_with_its_values_checked() -> None:
    for name in COMMAND_TABLE:
        command = load_command(name)
        assert command is _defined()[name][1]
    assert load_command("no-such-command") is None
    # a subcommand attached by a second module (registry import/list/choose from registry_db) is there too
    registry = load_command("registry")
    assert isinstance(registry, click.Group)
    assert {"export", "check", "show", "import", "list", "choose"} <= set(registry.commands)


def test_an_unknown_command_is_one_usage_line() -> None:
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command 'no-such-command'" in result.output


def _loaded_by(argv: list[str], prefixes: tuple[str, ...]) -> tuple[str, str]:
    """Run `servepack ARGV` in a fresh interpreter: the modules it left loaded whose names start with one of
    `prefixes` (as a sorted list's text), and what it printed."""
    probe = (
        "import sys\n"
        "from servepack.cli.main import cli\n"
        "try:\n"
        f"    cli({argv!r}, prog_name='servepack')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('LOADED', sorted(m for m in sys.modules if m.startswith({prefixes!r})), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return out.stderr.split("LOADED", 1)[1], out.stdout


def test_version_and_help_import_no_command_module_nor_the_pack_schema() -> None:
    loaded, stdout = _loaded_by(["--help"], ("servepack.cli.", "servepack.packs.schema", "servepack.bench.",
                                             "servepack.records", "servepack.pipeline", "pydantic", "httpx"))
    assert "servepack.cli._options" in loaded and "servepack.cli.render" in loaded  # the probe sees imports
    for heavy in ("servepack.cli.bench", "servepack.cli.records", "servepack.packs.schema", "servepack.pipeline",
                  "servepack.records", "pydantic", "httpx"):
        assert f"'{heavy}" not in loaded, heavy
    assert "bench " in stdout and "worker " in stdout


@pytest.mark.parametrize("command", ["bench", "run", "llama-bench"])
def test_a_commands_help_imports_no_pipeline_and_no_models(command: str) -> None:
    """`bench --help`, `run --help` and `llama-bench --help` load their command module, not what the command runs."""
    loaded, stdout = _loaded_by([command, "--help"], ("servepack.", "pydantic", "httpx"))
    assert "'servepack.cli.run'" in loaded  # the probe sees the command's own module
    for heavy in ("servepack.pipeline", "servepack.bench.", "servepack.packs.schema", "servepack.plan'", "pydantic",
                  "httpx"):
        assert f"'{heavy}" not in loaded, (heavy, loaded)
    assert "--help" in stdout and "Usage: servepack" in stdout
