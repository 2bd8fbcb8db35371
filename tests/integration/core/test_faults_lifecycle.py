"""Issue 11, items 10, 12 and 13 against the stand-in llama-server: no orphan after SIGHUP or SIGKILL, a stale
server proven ours is stopped by the next run, concurrency bounded by slots and client limits, --out under a file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from servepack.cli.main import cli
from servepack.engine.server import STAMP_SCHEMA, boot_id, proc_start_ticks, reap_stale
from servepack.plan import RunOptions, plan_run
from servepack.session import open_session


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def _serve(pack: Path, server_bin: Path, out: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """`servepack serve` in a subprocess; returns it and the stand-in server's pid once it is healthy."""
    proc = subprocess.Popen([sys.executable, "-m", "servepack.cli.main", "serve", str(pack), "--server-bin",
                             str(server_bin), "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    assert proc.stdout is not None
    pid = None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        if m := re.search(r"llama-server pid (\d+)", line):
            pid = int(m.group(1))
        if line.startswith("base URL:"):
            break
        assert time.monotonic() < deadline, "serve never became ready"
    assert pid is not None, "serve never said its server's pid"
    return proc, pid


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SERVEPACK_CACHE_DIR": str(tmp_path / "cache")}


def test_sighup_tears_down_and_writes_the_receipt(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                                  env: dict[str, str]) -> None:
    out = tmp_path / "run"
    proc, server = _serve(tiny_pack, fake_server_bin, out, env)
    proc.send_signal(signal.SIGHUP)  # the terminal or ssh session closed
    assert proc.wait(30) == 128 + signal.SIGHUP
    assert _wait_gone(server, 5)
    r = json.loads((out / "receipt.json").read_text())
    assert r["status"] == "partial" and r["error"] == "interrupted (SystemExit)"
    assert not list(out.glob(".*.pid.json"))  # a clean stop removes the stamp


def test_sigkill_of_servepack_takes_the_server_with_it(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                                       env: dict[str, str]) -> None:
    out = tmp_path / "run"
    proc, server = _serve(tiny_pack, fake_server_bin, out, env)
    stamp = json.loads((out / ".server.pid.json").read_text())
    assert stamp["pid"] == server and stamp["owner_pid"] == proc.pid
    assert stamp["start_ticks"] == proc_start_ticks(server)
    proc.kill()
    proc.wait(10)
    assert _wait_gone(server, 5), "llama-server outlived a SIGKILLed servepack"
    assert not (out / "receipt.json").exists()  # nothing can write it; the stamp says what happened
    res = CliRunner().invoke(cli, ["verify", str(out)])
    assert res.exit_code == 1 and "no receipt; servepack was killed during this run (it left .server.pid.json)" \
        in res.output


def test_the_next_run_stops_what_a_killed_one_left_behind(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                                          env: dict[str, str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The stand-in's own child is in its process group but has no parent-death signal: it outlives the kill.
    out = tmp_path / "run1"
    proc, server = _serve(tiny_pack, fake_server_bin, out, {**env, "FAKE_MODE": "spawn_child"})
    child = int(re.search(r"child pid (\d+)", (out / "server.log").read_text()).group(1))  # type: ignore[union-attr]
    proc.kill()
    proc.wait(10)
    assert _wait_gone(server, 5)
    assert not _gone(child)
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", env["SERVEPACK_CACHE_DIR"])
    said: list[str] = []
    with open_session(plan_run(str(tiny_pack), options=RunOptions(out=tmp_path / "run2", server_bin=fake_server_bin,
                                                                  progress=said.append))):
        pass
    assert _wait_gone(child, 5), "the next run did not stop the stale server's group"
    line = next(x for x in said if x.startswith("stopped a server left running"))
    assert f"servepack that was killed (pid {proc.pid})" in line and f"process group {server}" in line
    assert not (out / ".server.pid.json").exists() and not list((tmp_path / "cache" / "servers").iterdir())


def _stamp(path: Path, pid: int, *, owner: int, owner_ticks: int | None, ticks: int | None) -> Path:
    path.write_text(json.dumps({"schema_version": STAMP_SCHEMA, "pid": pid, "pgid": pid, "start_ticks": ticks,
                                "boot_id": boot_id(), "owner_pid": owner, "owner_start_ticks": owner_ticks,
                                "argv0": "llama-server", "log": "server.log"}))
    return path


@pytest.fixture
def sleeper() -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    yield p  # type: ignore[misc]
    p.kill()
    p.wait()


def _dead_owner() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_reaper_stops_a_server_it_can_prove_and_only_that(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    ticks = proc_start_ticks(sleeper.pid)
    # Owner alive (a concurrent run): left alone, stamp kept.
    alive = _stamp(tmp_path / "a.pid.json", sleeper.pid, owner=os.getpid(), owner_ticks=proc_start_ticks(os.getpid()),
                   ticks=ticks)
    assert reap_stale([alive]) == [] and alive.exists() and sleeper.poll() is None
    # Owner gone but the pid now has another start time (reused): not provably ours, never signalled.
    reused = _stamp(tmp_path / "b.pid.json", sleeper.pid, owner=_dead_owner(), owner_ticks=1, ticks=(ticks or 0) + 7)
    assert reap_stale([reused]) == [] and not reused.exists() and sleeper.poll() is None
    # A stamp that is not one (garbage, or another schema): ignored.
    junk = tmp_path / "c.pid.json"
    junk.write_text('{"pid": 1, "pgid": 1, "owner_pid": 2}')
    assert reap_stale([junk]) == [] and sleeper.poll() is None
    # Owner gone, same start time: stopped and reported.
    ours = _stamp(tmp_path / "d.pid.json", sleeper.pid, owner=_dead_owner(), owner_ticks=1, ticks=ticks)
    said = reap_stale([ours], grace_s=5)
    assert len(said) == 1 and f"pid {sleeper.pid} with the recorded start time" in said[0]
    assert sleeper.wait(5) is not None and not ours.exists()


def _bench(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["bench", *args])
    return res.exit_code, res.output


def test_concurrency_beyond_the_client_is_refused_before_launch(tiny_pack: Path, fake_server_bin: Path,
                                                                tmp_path: Path) -> None:
    start = time.monotonic()
    code, output = _bench(str(tiny_pack), "--server-bin", str(fake_server_bin), "--concurrency", "100000",
                          "--out", str(tmp_path / "run"))
    # refused where the command line is read: no bench opens more than 1,024 streams, as --help says
    assert code == 2 and "'--concurrency': 100000 is not in the range 1<=x<=1024" in output, output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists() and time.monotonic() - start < 30


def test_client_limit_follows_the_open_file_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    from servepack.testing import Script, ScriptedServer
    monkeypatch.setattr(resource, "getrlimit", lambda _: (100, 4096))
    with ScriptedServer(Script(slots=64)) as srv:
        code, output = _bench("--base-url", srv.base_url, "--model", "m", "--concurrency", "40",
                              "--out", str(tmp_path / "a"))
    assert code == 2 and "at most 32 concurrent streams (the open-file limit is 100 (`ulimit -n`))" in output


def test_concurrency_beyond_the_presets_slots_is_refused_before_launch(tiny_pack: Path, fake_server_bin: Path,
                                                                       tmp_path: Path) -> None:
    tiny_pack.write_text(tiny_pack.read_text().replace("jinja = true\n", "jinja = true\nparallel = 2\n", 1))
    code, output = _bench(str(tiny_pack), "--server-bin", str(fake_server_bin), "--concurrency", "3",
                          "--out", str(tmp_path / "run"))
    assert code == 2 and "concurrency 3 exceeds the server's 2 slots (preset 'p' sets parallel)" in output
    assert not (tmp_path / "run").exists()
    code, output = _bench(str(tiny_pack), "--server-bin", str(fake_server_bin), "--concurrency", "2",
                          "--prompt-tokens", "40", "--gen-tokens", "4", "--samples", "1",
                          "--out", str(tmp_path / "ok"))
    assert code == 0, output
    assert json.loads((tmp_path / "ok" / "receipt.json").read_text())["status"] == "complete"


def test_concurrency_beyond_the_servers_slots_is_refused_once_it_says(tiny_pack: Path, fake_server_bin: Path,
                                                                      tmp_path: Path) -> None:
    code, output = _bench(str(tiny_pack), "--server-bin", str(fake_server_bin), "--concurrency", "2",
                          "--out", str(tmp_path / "run"))
    assert code == 2 and "concurrency 2 exceeds the server's 1 slot (/props total_slots)" in output
    r = json.loads((tmp_path / "run" / "receipt.json").read_text())
    assert r["status"] != "complete" and "1 slot" in r["error"]
    assert not (tmp_path / "run" / "requests.jsonl").exists()


@pytest.mark.parametrize("command", [["bench"], ["run"], ["serve"], ["llama-bench"]])
def test_out_under_a_file_is_one_line_exit_2(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                             command: list[str]) -> None:
    (tmp_path / "afile").write_text("x")
    binary = ["--bench-bin" if command == ["llama-bench"] else "--server-bin", str(fake_server_bin)]
    res = CliRunner().invoke(cli, [*command, str(tiny_pack), *binary, "--out", str(tmp_path / "afile" / "run")])
    assert res.exit_code == 2, res.output
    assert f"{tmp_path / 'afile'} is a file, not a directory; choose another --out" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_out_under_a_file_attached_too(tmp_path: Path) -> None:
    from servepack.testing import ScriptedServer
    (tmp_path / "afile").write_text("x")
    with ScriptedServer() as srv:
        code, output = _bench("--base-url", srv.base_url, "--model", "m", "--out", str(tmp_path / "afile" / "x"))
    assert code == 2 and "is a file, not a directory" in output


def test_out_under_a_file_for_an_attached_smoke(tmp_path: Path) -> None:
    from servepack.testing import ScriptedServer
    (tmp_path / "afile").write_text("x")
    with ScriptedServer() as srv:
        res = CliRunner().invoke(cli, ["smoke", "run", "--base-url", srv.base_url, "--model", "m", "--suite",
                                       "agent_smoke", "--out", str(tmp_path / "afile" / "x")])
    assert res.exit_code == 2 and "afile is a file, not a directory" in res.output, res.output
    assert "Traceback" not in res.output
