"""Issue 35 item 2 on the real llama-server: one that ends up listening on another port than servepack started it on
(a second --port after servepack's, standing for any flag that moves it) fails the launch as soon as it says so in
its log, the line quoted, long before the health timeout; the same server told nothing else is healthy, and the
watch read its real "listening on" line as servepack's own address."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from servepack.engine.environ import server_env
from servepack.engine.locate import locate_binary
from servepack.engine.server import free_port, launch
from servepack.engine.serverlog import LISTENING
from servepack.errors import EngineError
from servepack.packs import load_pack
from servepack.settings import Settings
from servepack.weights.resolve import resolve_model

HEALTH_TIMEOUT_S = 300.0


def _argv(tmp_path: Path) -> list[str]:
    loaded = load_pack(None)
    model = resolve_model(loaded.pack.model, cache_dir=Settings.load().cache_dir, pack_dir=loaded.path.parent)
    binary = locate_binary("llama-server", loaded.pack.engine, None).path
    return [str(binary), "--model", str(model.path), "--ctx-size", "1024", "--threads", "2"]


def test_the_real_server_listening_elsewhere_fails_at_once(tmp_path: Path) -> None:
    port, elsewhere = free_port(), free_port()
    argv = [*_argv(tmp_path), "--host", "127.0.0.1", "--port", str(port), "--port", str(elsewhere)]
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:
        with launch(argv, host="127.0.0.1", port=port, model_alias="m", log_path=tmp_path / "server.log",
                    health_timeout_s=HEALTH_TIMEOUT_S, env=server_env("native").env):
            pass
    took = time.monotonic() - t0
    msg = str(info.value)
    assert took < 120, took
    assert f"listens on http://127.0.0.1:{elsewhere}, not on http://127.0.0.1:{port}" in msg
    assert "llama_server: listening on http" in msg  # the real line, quoted


def test_the_real_server_where_it_was_told_is_healthy(tmp_path: Path) -> None:
    port = free_port()
    argv = [*_argv(tmp_path), "--host", "127.0.0.1", "--port", str(port)]
    with launch(argv, host="127.0.0.1", port=port, model_alias="m", log_path=tmp_path / "server.log",
                health_timeout_s=HEALTH_TIMEOUT_S) as server:
        assert server.ready_s is not None
    said = [m.group(1) for line in (tmp_path / "server.log").read_text().splitlines()
            if (m := LISTENING.search(line)) is not None]
    assert said == [f"http://127.0.0.1:{port}"]  # the watch's pattern reads the real line, as servepack's address
