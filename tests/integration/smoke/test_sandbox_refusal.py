"""Mode `none`: a host with neither user namespaces nor bubblewrap refuses the executed layer, exit 2, one line.

Simulated: SERVEPACK_SANDBOX=bwrap makes the probe skip namespaces (as on a host without user namespaces),
and `bwrap` is taken off the lookup. The fallback that does exist (bubblewrap installed) is exercised by
the bwrap modes of test_sandbox_escape.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.smoke import sandbox
from servepack.smoke.layer_b import run_layer_b
from servepack.smoke.runners import SuiteOptions


@pytest.fixture
def no_isolation(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    which = sandbox.shutil.which
    monkeypatch.setenv("SERVEPACK_SANDBOX", "bwrap")
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else which(name))
    sandbox.isolation.cache_clear()
    yield
    sandbox.isolation.cache_clear()


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A chat server that records requests and answers with a text message."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def test_the_mode_is_none_and_names_the_package(no_isolation: None) -> None:
    iso = sandbox.isolation()
    assert iso.mode == "none"
    assert iso.reason == (
        "no sandbox for executed code: namespaces skipped (SERVEPACK_SANDBOX=bwrap); bubblewrap is not installed; "
        f"{sandbox.INSTALL_HINT}"
    )


def test_run_layer_b_refuses_before_any_request(no_isolation: None, server: tuple[str, list[Any]]) -> None:
    url, seen = server
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        run_layer_b(url, "m", "layer_b", None, SuiteOptions(case_ids=["terminal_count_rows"]))
    assert seen == []


def test_cli_exits_2_with_one_line(no_isolation: None, server: tuple[str, list[Any]], tmp_path: Path) -> None:
    url, seen = server
    result = CliRunner().invoke(
        cli, ["smoke", "--suite", "layer_b", "--base-url", url, "--model", "m", "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("servepack: error: no sandbox for executed code")
    assert "apt-get install bubblewrap" in lines[0] and "Traceback" not in result.output
    assert seen == []


def test_with_isolation_the_same_command_runs(server: tuple[str, list[Any]], tmp_path: Path) -> None:
    """The good path in other words: where a sandbox exists, Layer B runs and asks the server."""
    if sandbox.isolation().mode == "none":
        pytest.skip(sandbox.isolation().reason)
    url, seen = server
    result = CliRunner().invoke(cli, ["smoke", "--suite", "layer_b", "--base-url", url, "--model", "m",
                                      "--case", "terminal_count_rows", "--mode", "nonstream",
                                      "--out", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert len(seen) == 1 and seen[0]["model"] == "m"
