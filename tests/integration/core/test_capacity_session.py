"""`servepack capacity PACK` through a session: the fake server launched as llama-server with 2 scripted slots;
the receipt states the sweep, the knee, the limit and the observer-cost ratio (the server's pid is known)."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
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
