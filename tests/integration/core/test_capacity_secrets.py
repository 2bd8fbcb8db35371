"""Issue 25 item 7 for `servepack capacity`: a preset's --api-key is in none of the files a sweep writes (capacity.json,
the per-request records and CSV, sweep rows, charts, receipt, log) — every file walked — whether it is long enough to
be scrubbed by value or too short (three characters) or a bare TOML number, redacted by its name."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from secret_walk import leaks
from servepack.cli.main import cli

KEY = "sk-capacity-1a2b3c4d5e6f7a8b"


@pytest.mark.parametrize(("toml_value", "clear"), [(f'"{KEY}"', KEY), ('"Zq~"', "Zq~"), ("9753108", "9753108")],
                         ids=["long", "3-chars", "numeric"])
def test_a_capacity_sweep_writes_no_api_key(tiny_pack: Path, fake_server_bin: Path, tmp_path: Path,
                                            toml_value: str, clear: str) -> None:
    tiny_pack.write_text(tiny_pack.read_text().replace("jinja = true\n", f"jinja = true\napi-key = {toml_value}\n",
                                                       1))
    out = tmp_path / "cap"
    r = CliRunner().invoke(cli, ["capacity", str(tiny_pack), "--server-bin", str(fake_server_bin), "--out", str(out),
                                 "--slo", "ttft_p90=5s", "--max-concurrency", "2", "--requests", "4",
                                 "--prompt-tokens", "16", "--gen-tokens", "4", "--duration", "5s"])
    assert r.exit_code == 0, r.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"capacity.json", "receipt.json", "server.log"} <= {p.name for p in files}, files
    assert leaks(out, [clear]) == []
    assert "'--api-key', '<redacted>'" in (out / "server.log").read_text()
    assert clear not in (r.stdout + r.stderr).replace(str(tmp_path), "")
