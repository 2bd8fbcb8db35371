"""`packs.limits`: the bounds the pack schema and the command-line options share, importable without the schema's
models. The wrong answers: the schema validating against other numbers than the options, `registry list --context`
taking a context past MAX_TOKENS or refusing MAX_TOKENS itself, the limits pulling pydantic in."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.packs import limits, schema

NAMES = ("MAX_TOKENS", "MAX_COUNT", "MAX_STREAMS", "MAX_GIB", "MAX_BYTES", "MAX_DEVICES", "MAX_THREADS")


def test_the_schema_validates_against_the_same_bounds() -> None:
    for name in NAMES:
        assert getattr(schema, name) is getattr(limits, name), name
    assert limits.MAX_TOKENS == 1 << 24


def test_registry_list_context_is_bounded_by_max_tokens() -> None:
    runner = CliRunner()
    past = runner.invoke(cli, ["registry", "list", "--db", "/nonexistent-registry.sqlite3", "--context",
                               str(limits.MAX_TOKENS + 1)])
    assert past.exit_code == 2 and f"is not in the range 1<=x<={limits.MAX_TOKENS}" in past.output
    at = runner.invoke(cli, ["registry", "list", "--db", "/nonexistent-registry.sqlite3", "--context",
                             str(limits.MAX_TOKENS)])
    assert "--context" not in at.output and "no registry database here" in at.output  # the value passes


def test_the_limits_import_no_models() -> None:
    probe = ("import sys, servepack.packs.limits\n"
             "print('pydantic' in sys.modules, 'servepack.packs.schema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False"]
