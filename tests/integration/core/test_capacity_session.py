"""`servepack capacity PACK` through a session: the fake server launched as llama-server with 2 scripted slots;
the receipt states the sweep, the knee, the limit and the observer-cost ratio (the server's pid is known)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.cli.main import cli


def _server_bin(directory: Path) -> Path:
    exe = directory / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m servepack.testing.fake_server --queue --ttft 0.02 "
                   "--itl 0.01 \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_capacity_pack_records_the_sweep_in_the_receipt(tiny_pack: Path, tmp_path: Path) -> None:
    text = tiny_pack.read_text().replace("[presets.p.flags]\n", "[presets.p.flags]\nparallel = 2\n")
    tiny_pack.write_text(text)
    out = tmp_path / "cap"
    res = CliRunner().invoke(cli, ["capacity", str(tiny_pack), "--server-bin", str(_server_bin(tmp_path)),
                                   "--slo", "ttft_p90=60ms", "--slo", "decode_p10=10", "--max-concurrency", "4",
                                   "--requests", "6", "--prompt-tokens", "30", "--gen-tokens", "6", "--out",
                                   str(out)])
    assert res.exit_code == 0, res.output
    cap = json.loads((out / "capacity.json").read_text())
    assert cap["slots"] == 2 and cap["best_level"] == 2 and cap["limit"]["kind"] == "slo"
    assert "for 2 slots" in cap["limit"]["reason"] and cap["knee"]["level"] == 2
    # the server's process is known here: its CPU time is read from /proc and the ratio stated
    assert cap["observer"]["server_pids"] and cap["observer"]["server_cpu_s"] is not None
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["kind"] == "capacity" and receipt["status"] == "complete"
    notes = "\n".join(receipt["notes"])
    assert "highest level meeting every SLO 2 streams" in notes
    assert re.search(r"observer cost: servepack used [\d.]+ CPU-s, the server [\d.]+ CPU-s over", notes), notes
    assert {"capacity_requests.csv", "capacity_sweep_rows.json", "capacity_curve.svg"} <= {
        p.name for p in out.iterdir()}


@pytest.mark.needs("unshare")  # an empty network namespace
def test_capacity_refuses_a_non_loopback_base_url_inside_an_empty_netns(tmp_path: Path) -> None:
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("user/network namespaces not available here")
    done = subprocess.run(["unshare", "-rn", sys.executable, "-m", "servepack.cli.main", "capacity", "--base-url",
                           "http://10.1.2.3:8080", "--model", "m", "--slo", "ttft_p90=2s", "--out",
                           str(tmp_path / "c")], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "servepack talks to servers on this machine only (loopback)" in done.stderr
    assert "Traceback" not in done.stderr


def test_ctrl_c_during_a_point_spread_over_workers_exits_130_with_a_partial_receipt(tiny_pack: Path,
                                                                                     tmp_path: Path) -> None:
    # `capacity PACK --client-workers 2` and a terminal's Ctrl-C (SIGINT to the workers and the main thread) during
    # the first point, once both workers have been sending for 4 s (0.5 s requests): exit 130 as with one process,
    # the receipt partial and interrupted, capacity.json partial with the point's finished requests, MEASURED.md
    # written, and neither the workers nor the server left running.
    tiny_pack.write_text(tiny_pack.read_text().replace("[presets.p.flags]\n", "[presets.p.flags]\nparallel = 4\n"))
    out = tmp_path / "cap"
    seen: set[int] = set()
    done = threading.Event()

    def workers() -> list[int]:
        found = []
        for task in Path(f"/proc/{os.getpid()}/task").iterdir():
            with contextlib.suppress(OSError):
                for pid in (task / "children").read_text().split():
                    with contextlib.suppress(OSError):
                        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                            found.append(int(pid))
        return found

    def ctrl_c() -> None:
        since = None
        while not done.wait(0.05):
            pids = workers()
            seen.update(pids)
            if len(pids) == 2:
                since = since or time.monotonic()
                if time.monotonic() - since >= 4.0:
                    for pid in pids:
                        os.kill(pid, signal.SIGINT)
                    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                    return

    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's SIGINT (see test_capacity.py)
    watcher = threading.Thread(target=ctrl_c, daemon=True)
    watcher.start()
    try:
        res = CliRunner().invoke(cli, ["capacity", str(tiny_pack), "--server-bin", str(_server_bin(tmp_path)),
                                       "--slo", "ttft_p90=5s", "--start", "2", "--max-concurrency", "4",
                                       "--requests", "200", "--duration", "120s", "--prompt-tokens", "30",
                                       "--gen-tokens", "50", "--client-workers", "2", "--out", str(out)])
    finally:
        done.set()
        watcher.join(10)
        signal.signal(signal.SIGINT, old)
        for pid in seen:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, os.WNOHANG)
    assert res.exit_code == 130 and "interrupted" in res.output, res.output
    assert len(seen) == 2 and not any(Path(f"/proc/{pid}").exists() for pid in seen)
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["status"] == "partial" and "interrupted" in (receipt["error"] or "")
    cap = json.loads((out / "capacity.json").read_text())
    assert cap["status"] == "partial" and cap["stopped_reason"] == "interrupted (Ctrl-C)"
    (point,) = cap["points"]
    lines = (out / "capacity_requests.jsonl").read_text().splitlines()
    assert point["level"] == 2 and point["stopped"] == "interrupted (Ctrl-C)" and 1 <= point["n"] == len(lines) < 200
    assert (out / "MEASURED.md").is_file()
    pid = int(res.output.split("llama-server pid ")[1].split()[0])
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
