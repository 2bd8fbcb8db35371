"""Issue 25 item 7 for `servepack capacity`: a preset's --api-key is in none of the files a sweep writes (capacity.json,
the per-request records and CSV, sweep rows, charts, receipt, log) — every file walked."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from servepack.cli.main import cli

KEY = "sk-capacity-1a2b3c4d5e6f7a8b"


def test_a_capacity_sweep_writes_no_api_key(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path) -> None:
    tiny_pack.write_text(tiny_pack.read_text().replace("jinja = true\n", f'jinja = true\napi-key = "{KEY}"\n', 1))
    out = tmp_path / "cap"
    r = CliRunner().invoke(cli, ["capacity", str(tiny_pack), "--server-bin", str(fake_server_bin), "--out", str(out),
                                 "--slo", "ttft_p90=5s", "--max-concurrency", "2", "--requests", "4",
                                 "--prompt-tokens", "16", "--gen-tokens", "4", "--duration", "5s"])
    assert r.exit_code == 0, r.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"capacity.json", "receipt.json", "server.log"} <= {p.name for p in files}, files
    for path in files:
        assert KEY.encode() not in path.read_bytes(), f"the key leaked into {path.name}"
    assert KEY not in r.stdout + r.stderr
