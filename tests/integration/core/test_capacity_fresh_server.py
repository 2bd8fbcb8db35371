"""`servepack capacity PACK`: the fake launched as llama-server, scripted so that every served request slows later
prefills unless `--cache-ram 0` (as llama-server's host prompt cache): one server gives an order-dependent sweep
that names the flag to use; `--fresh-server-per-point` restarts the server before every point after the first
(outside the point's timing) and its knee holds."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from click.testing import CliRunner

from servepack.cli.main import cli


def _server_bin(directory: Path) -> Path:
    exe = directory / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m servepack.testing.fake_server --queue --ttft 0.05 "
                   "--itl 0.02 --carry-per-served 0.01 \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _run(pack: Path, tmp_path: Path, name: str, *extra: str) -> tuple[int, str, dict[str, object], Path]:
    out = tmp_path / name
    res = CliRunner().invoke(cli, ["capacity", str(pack), "--server-bin", str(_server_bin(tmp_path)), "--slo",
                                   "ttft_p90=2s", "--max-concurrency", "4", "--requests", "12", "--prompt-tokens",
                                   "30", "--gen-tokens", "6", "--out", str(out), *extra])
    cap = json.loads((out / "capacity.json").read_text()) if (out / "capacity.json").is_file() else {}
    return res.exit_code, res.output, cap, out


def test_one_server_is_order_dependent_and_a_fresh_server_per_point_holds(tiny_pack: Path, tmp_path: Path) -> None:
    tiny_pack.write_text(tiny_pack.read_text().replace("[presets.p.flags]\n", "[presets.p.flags]\nparallel = 4\n"))
    code, output, cap, out = _run(tiny_pack, tmp_path, "one")
    assert code == 1, output
    assert "order-dependent sweep, no knee claimed" in output and "--fresh-server-per-point" in output
    assert cap["independence"]["order_dependent"] is True and cap["knee"]["level"] is None  # type: ignore[index]
    carried = {c["name"]: c for c in cap["carry_over"]}  # type: ignore[attr-defined]
    assert carried["cache-ram"]["value"] == "8192" and "not in the argv" in carried["cache-ram"]["source"]
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["claim"]["eligible"] is False
    assert any("capacity: order-dependent sweep" in x for x in receipt["claim"]["reasons"]), receipt["claim"]
    notes = "\n".join(receipt["notes"])
    assert "capacity order: ORDER-DEPENDENT" in notes and "state kept across requests: cache-ram 8192" in notes

    code, output, cap, out = _run(tiny_pack, tmp_path, "fresh", "--fresh-server-per-point")
    assert code == 0, output
    assert cap["fresh_server"] is True and cap["independence"]["order_dependent"] is False  # type: ignore[index]
    assert cap["knee"]["level"] == 4  # type: ignore[index]
    points = cap["points"]  # type: ignore[assignment]
    pids = [tuple(p["observer"]["server_pids"]) for p in points]  # type: ignore[index,union-attr]
    assert len(set(pids)) == len(points), pids  # a new server process for every point
    assert points[0]["rest"]["fresh_server_s"] is None  # type: ignore[index]
    assert all(p["rest"]["fresh_server_s"] > 0 and p["rest"]["at_rest"] for p in points[1:])  # type: ignore[index]
    # every point's server start stays outside its timing: the wall time of a point is its load only
    assert all(p["wall_s"] < p["rest"]["fresh_server_s"] + 5 for p in points[1:])  # type: ignore[index]
