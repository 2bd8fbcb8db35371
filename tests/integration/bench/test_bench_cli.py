"""`servepack bench --base-url` against the scripted server, through click."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.testing import Script, ScriptedServer


def test_attach_json_and_files(tmp_path: Path) -> None:
    out = tmp_path / "att"
    with ScriptedServer(Script(ttft_s=0.02, itl_s=0.005, slots=2)) as srv:
        res = CliRunner().invoke(cli, ["bench", "--base-url", f"{srv.base_url}/v1", "--model", "m",
                                       "--prompt-tokens", "40", "--prompt-tokens", "90", "--gen-tokens", "6",
                                       "--samples", "2", "--concurrency", "1", "--concurrency", "2",
                                       "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout[res.stdout.index("{"):])
    assert summary["mode"] == "attach" and summary["all_fresh"] is True
    assert [(c["context_tokens"], c["concurrency"]) for c in summary["cells"]] == [(40, 1), (40, 2), (90, 1), (90, 2)]
    for c in summary["cells"]:
        # 2 rounds; on a busy host (this one is shared) a contended round is set aside and replaced, 6 rounds at most
        rounds, rest = divmod(c["n"], c["concurrency"])
        assert rest == 0 and 2 <= rounds <= 6 and (rounds == 2 or c["n_set_aside"] > 0), c
    assert {p.name for p in out.iterdir()} >= {"server_bench.json", "requests.jsonl", "memory.jsonl"}


def test_attach_needs_model_and_loopback() -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["bench", "--base-url", "http://127.0.0.1:9"])
    assert res.exit_code == 2 and "--model" in res.output
    res = runner.invoke(cli, ["bench", "--base-url", "http://10.0.0.1:8080", "--model", "m"])
    assert res.exit_code == 2 and "loopback" in res.output
