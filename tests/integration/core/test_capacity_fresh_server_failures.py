"""`servepack capacity PACK --fresh-server-per-point` when something fails between or during points: the server
will not start again (it exits at once), a fresh server that starts healthy and dies at its point, Ctrl-C while a
fresh server starts, a full disk while a point is written.
Each ends on one line naming what happened and what to do, with the points already measured kept on disk, and no
server process left behind. The fake is launched as llama-server through a wrapper that counts its starts."""

from __future__ import annotations

import _thread
import errno
import json
import os
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from disk_full import fill_disk
from servepack.cli.main import cli

FAKE = f"{sys.executable} -m servepack.testing.fake_server --queue --ttft 0.02 --itl 0.01"


def _server_bin(directory: Path, *, later: str) -> Path:
    """A llama-server whose first start is the fake; every later start runs `later` first (shell, may exit)."""
    exe = directory / "llama-server"
    count = directory / "starts"
    exe.write_text(f"""#!/bin/sh
for a in "$@"; do [ "$a" = --version ] && exec {FAKE} --version; done
n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}
if [ $n -ge 2 ]; then {later}; fi
exec {FAKE} "$@"
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _starts(directory: Path) -> int:
    try:
        return int((directory / "starts").read_text())
    except (OSError, ValueError):  # not written yet, or caught half-written
        return 0


def _argv(pack: Path, server_bin: Path, out: Path) -> list[str]:
    return ["capacity", str(pack), "--server-bin", str(server_bin), "--slo", "ttft_p90=2s", "--max-concurrency", "4",
            "--requests", "6", "--prompt-tokens", "30", "--gen-tokens", "4", "--out", str(out),
            "--fresh-server-per-point"]


def _ours_running(tmp_path: Path) -> list[str]:
    """Live processes whose command line names this test's directory (the wrapper, the fake), and their children
    (the `sleep` a slow start runs)."""
    procs: dict[int, tuple[int, str]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            procs[int(pid)] = (int(fields[1]), cmd)
    ours = {pid for pid, (_, cmd) in procs.items() if str(tmp_path) in cmd}
    while grown := {pid for pid, (ppid, _) in procs.items() if ppid in ours} - ours:
        ours |= grown
    return [f"{pid} {procs[pid][1]}" for pid in sorted(ours)]


def _errors(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("servepack: ")]


def _points(out: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in (out / "capacity_points.jsonl").read_text().splitlines()]


@pytest.fixture
def pack(tiny_pack: Path) -> Path:
    tiny_pack.write_text(tiny_pack.read_text().replace("[presets.p.flags]\n", "[presets.p.flags]\nparallel = 4\n"))
    return tiny_pack


def test_a_server_that_will_not_start_again_ends_the_sweep_with_its_points_kept(pack: Path, tmp_path: Path) -> None:
    # From its second start on, the server prints an error and exits at once (a model that no longer loads).
    out = tmp_path / "run"
    server_bin = _server_bin(tmp_path, later="echo 'error: failed to load model (fake)'; exit 3")
    res = CliRunner().invoke(cli, _argv(pack, server_bin, out))
    assert _starts(tmp_path) == 2, res.output  # the first server, then the one fresh start that failed
    (err,) = _errors(res.output)
    assert "Traceback" not in res.output
    # what happened, which point it stopped before, where the finished points are, and what to do
    assert err.startswith("servepack: error: capacity sweep stopped: the fresh server for 2 streams did not start"), err
    assert "exited" in err and "code 3" in err, err
    assert f"finished points kept in {out}" in err and "server.log" in err, err
    assert res.exit_code == 1, res.output  # a server that died mid-run (errors.ServerDied), not bad input (2)
    cap = json.loads((out / "capacity.json").read_text())
    assert cap["status"] == "partial" and cap["stopped_reason"].startswith("fresh server for 2 streams did not start")
    assert cap["independence"]["order_dependent"] is None  # stopped before its repeats: not checked
    assert [p["level"] for p in _points(out)] == [1] and _points(out)[0]["passed"] is True
    assert [p["level"] for p in cap["points"]] == [1]
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "partial" and "did not start" in receipt["error"], receipt.get("error")
    assert _ours_running(tmp_path) == []



@pytest.mark.usefixtures("terminal_sigint")
def test_ctrl_c_while_a_fresh_server_starts_keeps_the_points_and_stops_it(pack: Path, tmp_path: Path) -> None:
    # The second start takes 30 s before it serves (a large model loading); Ctrl-C arrives while it does.
    out = tmp_path / "run"
    server_bin = _server_bin(tmp_path, later="sleep 30")
    done = threading.Event()
    seen: list[str] = []

    def ctrl_c() -> None:  # once the slow start is under way (its sleep running), servepack waiting for /health
        while not done.wait(0.05):
            running = _ours_running(tmp_path) if _starts(tmp_path) >= 2 else []
            if any("sleep 30" in p for p in running):
                seen.extend(running)
                _thread.interrupt_main()
                return

    watcher = threading.Thread(target=ctrl_c, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    try:
        res = CliRunner().invoke(cli, _argv(pack, server_bin, out))
    finally:
        done.set()
        watcher.join(5)
    assert time.monotonic() - t0 < 25, res.output  # it did not wait for the slow start
    assert res.exit_code == 130, res.output
    lines = _errors(res.output)
    assert lines[-1] == "servepack: interrupted", lines
    assert (f"capacity interrupted (Ctrl-C) while the fresh server for 2 streams started; finished points kept in "
            f"{out} (capacity.json: partial)") in " ".join(res.output.split()), res.output
    cap = json.loads((out / "capacity.json").read_text())
    assert cap["status"] == "partial"
    assert cap["stopped_reason"] == "interrupted (Ctrl-C) while the fresh server for 2 streams started"
    assert [p["level"] for p in _points(out)] == [1] == [p["level"] for p in cap["points"]]
    assert any("sleep 30" in p for p in seen), seen  # the wrong answer: the slow start was running, and seen
    assert _ours_running(tmp_path) == []  # the slow start (its `sleep` too) was stopped, not left to finish


def test_a_full_disk_while_a_point_is_written_keeps_the_points_before_it(pack: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Once the first point's statistics are on disk the disk fills: the second point's records meet ENOSPC (at
    # fsync, as the kernel reports a full disk for buffered writes), and so does every file written after.
    import servepack.store as store

    out = tmp_path / "run"
    server_bin = _server_bin(tmp_path, later=":")
    real_fsync, real_write = os.fsync, store.JsonlWriter.write
    full: list[str] = []

    def write(self: store.JsonlWriter, record: Any) -> None:
        real_write(self, record)
        if self.path.name == "capacity_points.jsonl" and not full:
            full.append(str(self.path))
            fill_disk(monkeypatch)  # every new file refused from here on

            def fsync(fd: int) -> None:
                if os.readlink(f"/proc/self/fd/{fd}").startswith(str(out)):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                real_fsync(fd)

            monkeypatch.setattr(os, "fsync", fsync)

    monkeypatch.setattr(store.JsonlWriter, "write", write)
    monkeypatch.setenv("SERVEPACK_CACHE_DIR", str(tmp_path / "cache"))
    res = CliRunner().invoke(cli, _argv(pack, server_bin, out))
    assert full, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    (err,) = _errors(res.output)
    assert "cannot write capacity_requests.jsonl" in err and "the disk is full" in err, err
    assert "what was already written is kept (1 finished point in capacity_points.jsonl; capacity.json not " \
           "written): make room there or choose another --out, then run again" in err, err
    assert res.exit_code == 1, res.output
    assert [p["level"] for p in _points(out)] == [1]  # the first point whole; the second left no torn line
    assert (out / "capacity_points.jsonl").read_text().endswith("}\n")
    # capacity.json cannot be written on a full disk: it is absent, never a torn or "complete" file
    assert not (out / "capacity.json").exists()
    assert _ours_running(tmp_path) == []


def test_a_fresh_server_that_starts_healthy_and_dies_at_the_point_ends_the_sweep(pack: Path, tmp_path: Path) -> None:
    # From its second start on, the server answers /health, then exits at its first generation request: the fresh
    # server was healthy before the point, and died in it.
    out = tmp_path / "run"
    server_bin = _server_bin(tmp_path, later="export FAKE_MODE=exit_on_generation")
    res = CliRunner().invoke(cli, _argv(pack, server_bin, out))
    assert _starts(tmp_path) == 2, res.output  # the first server, then one fresh server that started and died
    assert "fresh server for 2 streams: started in" in res.output, res.output  # it did start (healthy)
    (err,) = _errors(res.output)
    assert "Traceback" not in res.output
    assert err.startswith("servepack: error: llama-server (pid "), err
    assert "exited with code 9 during the run; partial results kept" in err and str(out / "server.log") in err, err
    assert res.exit_code == 1, res.output
    cap = json.loads((out / "capacity.json").read_text())
    assert cap["status"] == "partial" and cap["stopped_reason"].startswith("server died"), cap["stopped_reason"]
    levels = [(p["level"], p["stopped"]) for p in cap["points"]]
    assert levels[0] == (1, None) and levels[1][0] == 2 and levels[1][1].startswith("server died"), levels
    assert cap["points"][1]["n_ok"] == 0
    assert cap["best_level"] == 1 and cap["knee"]["level"] is None, cap["knee"]  # 2 was never judged: no knee
    assert "exiting at the first generation request" in (out / "server.log").read_text()
    assert _ours_running(tmp_path) == []
