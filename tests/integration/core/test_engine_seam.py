"""The engine seam: a second engine is one module and one table entry; attach launches nothing."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.engine import catalog
from servepack.engine.base import Endpoint, EngineProcess, LaunchRequest
from servepack.engine.locate import EngineFacts
from servepack.engine.server import launch
from servepack.errors import UsageError
from servepack.packs.schema import EnginePin
from servepack.pipeline.bench import bench_in_session
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session
from servepack.testing import Script, ScriptedServer


class FakeProcessEngine:
    """A test engine: the shared fake server as a subprocess, launched and torn down through the seam."""

    name: ClassVar[str] = "fake"
    launches: ClassVar[bool] = True

    def locate(self, pin: EnginePin, override: Path | None) -> EngineFacts | None:
        return None

    def argv(self, req: LaunchRequest) -> list[str]:
        return [sys.executable, "-m", "servepack.testing.fake_server", "--host", req.host, "--port", str(req.port),
                "--ttft", "0.02", "--itl", "0.005"]

    @contextlib.contextmanager
    def launch(self, req: LaunchRequest) -> Iterator[Endpoint]:
        argv = self.argv(req)
        with launch(argv, host=req.host, port=req.port, model_alias="fake-model", log_path=req.log_dir / "fake.log",
                    health_timeout_s=req.health_timeout_s) as server:
            proc = EngineProcess(role="fake-server", host=req.host, argv=argv, binary_sha256=None, pid=server.pid,
                                 log="fake.log")
            try:
                yield Endpoint(base_url=server.base_url, model=server.model, processes=[proc],
                               ready_s=server.ready_s, watch=[server])
            finally:
                proc.exit_code = server.stop()


def _with_engine(pack: Path, engine_table: str) -> Path:
    text = pack.read_text()
    start = text.index("[engine]")
    end = text.index("[hardware]")
    pack.write_text(text[:start] + engine_table + "\n" + text[end:])
    return pack


def test_a_second_engine_is_one_table_entry(tiny_pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(catalog.ENGINES, "fake", lambda settings: FakeProcessEngine())
    pack = _with_engine(tiny_pack, '[engine]\nname = "fake"\nrepo = "r"\ncommit = "abc1234"')
    out = tmp_path / "run"
    with open_session(plan_run(str(pack), options=RunOptions(out=out, kind="bench"))) as s:
        assert s.engine is None and s.endpoint.processes[0].role == "fake-server"
        summary = bench_in_session(s, lambda _: None, context_marks=(48,), gen_tokens=6, samples=2, warmup=0,
                                   concurrency=(1,))
    assert summary.cells[0].n == 2 and summary.all_fresh
    r = json.loads((out / "receipt.json").read_text())
    (proc,) = r["server"]["processes"]
    assert proc["role"] == "fake-server" and proc["argv"][1:3] == ["-m", "servepack.testing.fake_server"]
    assert proc["pid"] and proc["exit_code"] is not None and proc["log"] == "fake.log"
    assert r["engine"] is None and r["status"] == "complete"
    assert "engine facts unavailable: the server was attached, not launched by servepack" in r["claim"]["reasons"]


def test_unknown_engine_name_is_a_usage_error(tiny_pack: Path) -> None:
    pack = _with_engine(tiny_pack, '[engine]\nname = "vllm-nightly"\nrepo = "r"\ncommit = "abc1234"')
    known = "not a known engine; choose one of ['attach', 'llama.cpp', 'vllm']"
    with pytest.raises(UsageError, match=re.escape(known)):
        with open_session(plan_run(str(pack))):
            pass
    r = CliRunner().invoke(cli, ["pack", "validate", str(pack)])
    assert r.exit_code == 2 and "engine.name: 'vllm-nightly' is not a known engine" in r.output


def test_attach_engine_launches_nothing_and_is_never_claimable(tiny_pack: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ScriptedServer(Script(ttft_s=0.01, itl_s=0.002)) as srv:
        pack = _with_engine(tiny_pack, f'[engine]\nname = "attach"\nrepo = "r"\nbase_url = "{srv.base_url}/v1"\n'
                                       'served_model = "m"')
        with open_session(plan_run(str(pack), options=RunOptions(out=out, kind="bench"))) as s:
            assert not s.endpoint.launched and s.endpoint.pid is None and s.model is None
            assert s.endpoint.base_url == srv.base_url
            summary = bench_in_session(s, lambda _: None, context_marks=(40,), gen_tokens=5, samples=1, warmup=0,
                                       concurrency=(1,))
    assert summary.mode == "attach" and summary.cells[0].n == 1
    r = json.loads((out / "receipt.json").read_text())
    assert r["engine"] is None and r["model"] is None and r["server"]["processes"][0]["role"] == "attached"
    assert r["claim"]["eligible"] is False
    assert any(x.startswith("model bytes unverified") for x in r["claim"]["reasons"])


def test_attach_engine_refuses_a_server_that_does_not_answer(tiny_pack: Path, tmp_path: Path) -> None:
    from servepack.engine.server import free_port
    from servepack.errors import EngineError

    pack = _with_engine(tiny_pack, f'[engine]\nname = "attach"\nrepo = "r"\n'
                                   f'base_url = "http://127.0.0.1:{free_port()}"\nserved_model = "m"')
    with pytest.raises(EngineError, match="does not answer"):
        with open_session(plan_run(str(pack), options=RunOptions(out=tmp_path / "run"))):
            pass
    r = json.loads((tmp_path / "run" / "receipt.json").read_text())
    assert r["status"] == "failed" and r["claim"]["reasons"][0] == "run did not start"


@pytest.mark.needs("unshare")  # an empty network namespace
@pytest.mark.parametrize("url", ["http://10.1.2.3:8080", "http://127.0.0.1@10.1.2.3:1", "http://127.0.0.1.nip.io:1",
                                 "http://localhost.example.com:1", "ftp://127.0.0.1:1"])
def test_non_loopback_base_url_is_refused_inside_an_empty_netns(url: str, tmp_path: Path) -> None:
    """Run in `unshare -rn` so nothing could leave even if the check failed."""
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("user/network namespaces not available here")
    for cmd in (["bench", "--base-url", url, "--model", "m", "--out", str(tmp_path / "b")],
                ["smoke", "--base-url", url, "--model", "m", "--suite", "agent_smoke", "--out", str(tmp_path / "s")]):
        done = subprocess.run(["unshare", "-rn", sys.executable, "-m", "servepack.cli.main", *cmd],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        assert "servepack talks to servers on this machine only (loopback)" in done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "s").exists()


def test_attach_pack_without_served_model_is_a_usage_error(tiny_pack: Path, tmp_path: Path) -> None:
    with ScriptedServer(Script()) as srv:
        pack = _with_engine(tiny_pack, f'[engine]\nname = "attach"\nrepo = "r"\nbase_url = "{srv.base_url}"')
        with pytest.raises(UsageError, match=re.escape("must set engine.base_url and engine.served_model")):
            with open_session(plan_run(str(pack), options=RunOptions(out=tmp_path / "run"))):
                pass


def test_an_attached_server_that_goes_away_is_server_died() -> None:
    from servepack.engine.attach import attach
    from servepack.errors import ServerDied

    with ScriptedServer(Script()) as srv:
        endpoint = attach(srv.base_url, "m")
        endpoint.check_alive()  # answering: nothing raised
    with pytest.raises(ServerDied, match="stopped answering"):
        endpoint.check_alive()
