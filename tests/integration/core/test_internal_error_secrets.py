"""Issue 25 item 7: an internal error (exit 70) shows no secret. Its message, and the traceback `--debug` prints,
lose each secret value the run registered (a pack preset's api-key, found by value where no name goes with it) and
every value a name marks (an argv printed as a list, a YAML line). The exit code stays 70.

The wrong answer (before): `servepack: internal error: RuntimeError: … sk-…` on the terminal, the key in clear,
and under `--debug` Python's own traceback with the same message."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import servepack.plan as plan_mod
from servepack.cli.main import cli
from servepack.errors import EngineError
from servepack.redact import REDACTED

LONG = "sk-live-0c9d3e7f51"
SIX = "Qp7~zW"  # shorter than the store's 8 for files, long enough (4) to be removed from a message by value
SHORT = "k9"  # by name only


def _keyed(pack: Path, key: str) -> Path:
    pack.write_text(pack.read_text().replace("jinja = true\n", f'jinja = true\napi-key = "{key}"\n', 1))
    return pack


def _broken(exc: Exception) -> object:
    def get_engine(*args: object, **kwargs: object) -> None:  # inside the run: the preset's key is registered
        raise exc

    return get_engine


@pytest.mark.parametrize("key", [LONG, SIX], ids=["long", "6-chars"])
@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_an_internal_error_shows_no_key_and_exits_70(tiny_pack: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, key: str, debug: bool) -> None:
    pack = _keyed(tiny_pack, key)
    monkeypatch.setattr(plan_mod, "get_engine", _broken(RuntimeError(
        f"server refused key {key}; argv ['llama-server', '--api-key', '{SHORT}'] config\nadmin_key: {SHORT}")))
    r = CliRunner().invoke(cli, [*(["--debug"] if debug else []), "run", str(pack), "--out", str(tmp_path / "run"),
                                 "--no-smoke"])
    assert r.exit_code == 70, r.output
    shown = r.stdout + r.stderr
    assert key not in shown and f"'{SHORT}'" not in shown and f"admin_key: {SHORT}" not in shown
    assert f"server refused key {REDACTED}; argv ['llama-server', '--api-key', '{REDACTED}']" in shown
    if debug:
        assert "Traceback (most recent call last)" in shown and f"admin_key: {REDACTED}" in shown
    else:
        assert shown.startswith(f"servepack: internal error: RuntimeError: server refused key {REDACTED}")
        assert "--debug" in shown and len(shown.strip().splitlines()) == 1  # still one line


def test_a_servepack_error_loses_a_registered_key_and_keeps_its_exit_code(
        tiny_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack = _keyed(tiny_pack, SIX)
    monkeypatch.setattr(plan_mod, "get_engine", _broken(EngineError(f"the engine echoed {SIX} and stopped")))
    for debug in ([], ["--debug"]):
        r = CliRunner().invoke(cli, [*debug, "run", str(pack), "--out", str(tmp_path / f"run{len(debug)}"),
                                     "--no-smoke"])
        assert r.exit_code == EngineError.exit_code, r.output
        assert SIX not in r.output and f"the engine echoed {REDACTED} and stopped" in r.output
