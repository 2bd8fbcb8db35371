"""`servepack bench` and `servepack capacity` leave the evidence `servepack run` leaves: MEASURED.md and report.html,
with the capacity answer, the named limit, launch lag, client_limited and joules per output token; verify passes."""

from __future__ import annotations

import json
import re
import stat
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from servepack.bench.capacity import PointStats
from servepack.cli.main import cli
from servepack.host import energy
from servepack.host.energy import Device, Source
from servepack.report.measured_capacity import client_text, lag_text


def _server_bin(directory: Path) -> Path:
    exe = directory / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m servepack.testing.fake_server --queue --ttft 0.02 "
                   "--itl 0.01 \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.fixture
def gpu_meter(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host's NVML meter replaced by one GPU drawing 300 W (its counter: 300 × seconds)."""
    src = Source("nvml", "GPU total-energy counter (scripted)", [Device("GPU 0 (scripted)",
                                                                       lambda: 300.0 * time.monotonic())])
    monkeypatch.setattr(energy, "nvml_source", lambda: src)


def test_capacity_writes_measured_and_the_page_with_limit_lag_and_energy(tiny_pack: Path, tmp_path: Path,
                                                                          gpu_meter: None) -> None:
    tiny_pack.write_text(tiny_pack.read_text().replace("[presets.p.flags]\n", "[presets.p.flags]\nparallel = 2\n"))
    out = tmp_path / "cap"
    res = CliRunner().invoke(cli, ["capacity", str(tiny_pack), "--server-bin", str(_server_bin(tmp_path)),
                                   "--slo", "ttft_p90=60ms", "--max-concurrency", "4", "--requests", "6",
                                   "--prompt-tokens", "30", "--gen-tokens", "6", "--out", str(out)])
    assert res.exit_code == 0, res.output
    cap = json.loads((out / "capacity.json").read_text())
    measured = (out / "MEASURED.md").read_text()
    assert "## Capacity" in measured
    assert "Limit: **" in measured and cap["limit"]["reason"] in measured
    points_part, evidence_part = measured.split("What each point measured")
    rows = [ln for ln in points_part.splitlines() if re.match(r"^\| \d", ln)]
    assert len(rows) == len(cap["points"])
    seen = [ln for ln in evidence_part.splitlines() if re.match(r"^\| \d", ln)]
    assert [ln.split("|")[1].strip() for ln in seen] == [f"{p['level']:g}" for p in cap["points"]]
    for p, ln in zip(cap["points"], seen, strict=True):
        gpu = (p["evidence"] or {}).get("gpu_sm_pct")
        assert ln.split("|")[2].strip() == ("—" if gpu is None else f"{gpu:.0f}%")
        if gpu is None:  # an absent GPU meter is named, never shown as an idle GPU
            assert (p["evidence"] or {}).get("gpu_note", "no readings").split(":")[0] in ln
    for p, row in zip(cap["points"], rows, strict=True):
        e = next(x["energy"] for x in cap["energy"] if x["point"] == p["index"])
        gpu = next(m for m in e["meters"] if m["meter"] == "nvml")
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == f"{p['level']:g}"
        lag = (p["launch_lag_p50_ms"], p["launch_lag_p99_ms"])
        assert cells[5] == ("—" if lag == (None, None) else f"{lag[0]:,.2f} / {lag[1]:,.2f}")
        client = p["client_limited"]
        assert cells[6] == ("—" if client is None else "kept up" if not client else
                            f"client-limited (p99 > {p['client_lag_bound_ms']:g} ms)")
        assert cells[9] == f"{gpu['j_per_output_token']:.4g}" and gpu["j_per_output_token"] > 0
        assert cells[10] == "nvml (GPU 0 (scripted))"
    # a point whose client fell behind reads so, with its lag, in both views' words
    late = PointStats.model_validate(cap["points"][0]).model_copy(update={
        "launch_lag_p50_ms": 3.25, "launch_lag_p99_ms": 41.5, "client_limited": True, "client_lag_bound_ms": 10.0})
    assert (lag_text(late), client_text(late)) == ("3.25 / 41.50", "client-limited (p99 > 10 ms)")
    kept = late.model_copy(update={"client_limited": False})
    assert client_text(kept) == "kept up"
    page = (out / "report.html").read_text()
    assert "9 · Capacity" in page and "launch lag p50 / p99 ms" in page
    assert "joules per output token by load" in page  # the J/token chart is drawn
    assert "no capacity sweep" not in page and "could not be drawn" not in page
    receipt = json.loads((out / "receipt.json").read_text())
    assert any(n.startswith("energy: nvml [GPU 0 (scripted)]") for n in receipt["notes"]), receipt["notes"]
    verified = CliRunner().invoke(cli, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    # a point's J/token edited: verify recomputes it from the device joules and the point's own requests
    from servepack.records.verify import verify_run

    gpu = cap["energy"][0]["energy"]["meters"][0]
    gpu["j_per_output_token"] = round(gpu["j_per_output_token"] * 2, 6)
    (out / "capacity.json").chmod(0o644)
    (out / "capacity.json").write_text(json.dumps(cap, indent=2))
    figures = [m.what for m in verify_run(out).mismatches if m.file == "capacity.json"]
    assert "energy[point=0].meters" in figures, figures
    # its raw file named outside the run, or gone: one line for both (the bench's summary says them apart)
    for raw_name in ("../stolen.jsonl", "gone.jsonl"):
        (out / "capacity.json").write_text(json.dumps({**cap, "requests_file": raw_name}, indent=2))
        whats = [m.what for m in verify_run(out).mismatches if m.file == "capacity.json"]
        assert f"raw file {raw_name!r} is missing or not inside the results directory" in whats, whats


def test_bench_writes_measured_and_the_page_with_each_cells_energy(tiny_pack: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    res = CliRunner().invoke(cli, ["bench", str(tiny_pack), "--server-bin", str(_server_bin(tmp_path)),
                                   "--prompt-tokens", "40", "--gen-tokens", "8", "--samples", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "server_bench.json").read_text())
    (cell,) = summary["energy"]
    measured = (out / "MEASURED.md").read_text()
    assert "Energy of the bench cells above" in measured
    # this host's meters: each either read or is named unreadable with its reason, never a silent zero
    for m in cell["energy"]["meters"]:
        if m["joules"] is None:
            assert m["unreadable"] and m["unreadable"] in (out / "report.html").read_text().replace("&#x27;", "'")
    if all(m["joules"] is None for m in cell["energy"]["meters"]):
        assert "| — | — | unreadable (" in measured
    page = (out / "report.html").read_text()
    assert "10 · Energy" in page and "could not be drawn" not in page
    verified = CliRunner().invoke(cli, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output


def test_verify_recomputes_joules_per_output_token_from_the_raw_requests(tiny_pack: Path, tmp_path: Path,
                                                                         gpu_meter: None) -> None:
    from servepack.records.verify import verify_run

    out = tmp_path / "bench"
    res = CliRunner().invoke(cli, ["bench", str(tiny_pack), "--server-bin", str(_server_bin(tmp_path)),
                                   "--prompt-tokens", "40", "--gen-tokens", "8", "--samples", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert verify_run(out).ok
    path = out / "server_bench.json"
    doc = json.loads(path.read_text())
    gpu = doc["energy"][0]["energy"]["meters"][0]
    assert gpu["meter"] == "nvml" and gpu["j_per_output_token"] > 0
    gpu["j_per_output_token"] = round(gpu["j_per_output_token"] / 10, 6)  # a tenth of the energy per token: wrong
    path.chmod(0o644)
    path.write_text(json.dumps(doc, indent=2))
    figures = [m.what for m in verify_run(out).mismatches if m.file == "server_bench.json"]
    assert "energy[ctx=40,c=1].meters" in figures, figures
