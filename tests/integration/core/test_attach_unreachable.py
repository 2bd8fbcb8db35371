"""`--base-url` naming a loopback port where nothing answers is refused before a results directory is made, one line
naming the fix, exit 2, by the one place every attached endpoint comes from (`engine.attach.attach`): bench and
capacity ran a whole sweep against it and said the server "stopped answering", exit 1, leaving an empty results
directory; smoke ran every case into TRANSPORT_CONNECT, exit 0. Loopback only; scratch directories only."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.engine.server import free_port


@pytest.mark.parametrize("argv", [
    ["bench", "--base-url", "{url}", "--model", "m"],
    ["smoke", "run", "--base-url", "{url}", "--model", "m", "--suite", "agent_smoke"],
    ["capacity", "--base-url", "{url}", "--model", "m", "--slo", "ttft_p90=1s"],
], ids=["bench", "smoke", "capacity"])
def test_nothing_answering_at_the_base_url_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       argv: list[str]) -> None:
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SERVEPACK_RESULTS_DIR", str(tmp_path / "results"))
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(cli, [a.format(url=url) for a in argv])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[-1] == (f"servepack: error: attached server {url} does not answer "
                                              "(ConnectError); start it first or fix --base-url")
    assert [line for line in result.stderr.splitlines() if line.startswith("servepack:")] == \
        result.stderr.splitlines()[-1:]
    assert not (tmp_path / "results").exists()  # no results directory made
