"""Issue 35 item 2: a server that listens somewhere else than where servepack started it (a preset flag moved it),
or logs a fatal error, fails the launch at once with the log line in the error, not after the health timeout; a
server that says it listens where it was told is taken as before. servepack's own --host/--port come last in
the argv, so a preset flag can not move them (llama-server keeps the last value)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from servepack.engine.server import build_argv, free_port, launch
from servepack.engine.serverlog import LogWatch
from servepack.errors import EngineError
from servepack.packs.schema import Preset

HEALTH_TIMEOUT_S = 60.0  # what the old code waited out: every failure below must come far sooner


def _script(*lines: str, then: str = "import time; time.sleep(120)") -> list[str]:
    prints = "".join(f"print({line!r}, flush=True); " for line in lines)
    return [sys.executable, "-c", prints + then]


def _launch(argv: list[str], log: Path, port: int) -> float:
    t0 = time.monotonic()
    with launch(argv, host="127.0.0.1", port=port, model_alias="m", log_path=log, health_timeout_s=HEALTH_TIMEOUT_S):
        pass
    return time.monotonic() - t0


@pytest.mark.parametrize("line", [
    "0.04.138.073 I srv  llama_server: listening on http://127.0.0.1:8012",  # the pinned build; a preset's port
    "srv          main: listening on http://0.0.0.0:{port}",  # an older build's line; the right port, another host
    "srv  llama_server: listening on unix:///tmp/llama.sock",
])
def test_a_server_listening_elsewhere_fails_at_once_with_the_line(tmp_path: Path, line: str) -> None:
    port = free_port()
    said = line.format(port=port)
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:
        _launch(_script("build: 1 (abc)", said), tmp_path / "server.log", port)
    took = time.monotonic() - t0
    msg = str(info.value)
    assert took < 10, f"waited {took:.0f} s: the log was not read"
    assert f"not on http://127.0.0.1:{port} where servepack started it" in msg and repr(said) in msg
    assert "SERVEPACK_HEALTH_TIMEOUT_S" not in msg  # not the timeout's advice


@pytest.mark.parametrize("line", [
    "srv    load_model: failed to load model, '/m/model.gguf'",
    "srv          main: exiting due to model loading error",
    "srv          main: failed to download model: HTTP 404",
    "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
    "error while handling argument \"--ctx-size\": stoi",
])
def test_a_fatal_line_fails_at_once_even_while_the_process_lingers(tmp_path: Path, line: str) -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:
        _launch(_script("loading", line), tmp_path / "server.log", port)
    assert time.monotonic() - t0 < 10
    msg = str(info.value)
    assert "logged a fatal error before it was healthy" in msg and repr(line) in msg and "\n" not in msg


def test_a_server_listening_where_it_was_told_is_healthy_and_old_lines_are_not_read(tmp_path: Path) -> None:
    """The wrong answer this guards: a watch that fails on any listening line, or reads an earlier launch's log."""
    log = tmp_path / "server.log"
    log.write_text("srv          main: listening on http://127.0.0.1:8012\nexiting due to HTTP server error\n")
    port = free_port()
    serve = (f"from servepack.testing.fake_server import main; "
             f"main(['--host', '127.0.0.1', '--port', '{port}'])")
    took = _launch(_script(f"0.04.138.073 I srv  llama_server: listening on http://127.0.0.1:{port}", then=serve),
                   log, port)
    assert took < HEALTH_TIMEOUT_S


def test_the_watch_reads_whole_lines_only_and_says_nothing_for_ordinary_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    watch = LogWatch(log, "127.0.0.1", 4000)
    with log.open("a") as fh:
        fh.write("srv  load_model: loading model\nsrv          main: listening on http://127.0.0.1:80")
    assert watch.problem() is None  # the listening line is not finished: its port may go on
    with log.open("a") as fh:
        fh.write("12\n")
    said = watch.problem()
    assert said is not None and "listens on http://127.0.0.1:8012" in said
    with log.open("a") as fh:
        fh.write("srv          main: listening on http://127.0.0.1:4000\n")
    assert watch.problem() is None and watch.listening == "http://127.0.0.1:4000"
    v6 = LogWatch(log, "::1", 4000)
    with log.open("a") as fh:
        fh.write("srv          main: listening on http://[::1]:4000\n")
    assert v6.problem() is None


def test_servepacks_own_address_and_model_come_after_every_preset_flag(tmp_path: Path) -> None:
    preset = Preset(flags={"ctx-size": 4096, "jinja": True, "alias": "x"})
    argv = build_argv(Path("/bin/llama-server"), tmp_path / "m.gguf", preset, host="127.0.0.1", port=4321)
    assert argv[1:3] == ["--model", str(tmp_path / "m.gguf")]
    assert argv[3:] == ["--ctx-size", "4096", "--jinja", "--alias", "x", "--host", "127.0.0.1", "--port", "4321"]
