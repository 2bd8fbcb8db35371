"""The report of a real `servepack run` (llama-server, embedded model) in headless Chromium, offline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "report"))

from report_browser import ink_pixels, load

from servepack.packs import load_pack
from servepack.records.evidence import evidence_for

SERVEPACK = [sys.executable, "-m", "servepack.cli.main"]


def test_report_of_a_real_run_renders_offline_with_the_headline_of_server_bench_json(tmp_path: Path) -> None:
    h = load_pack(None).pack.claims.headline
    out = tmp_path / "results" / "run"
    done = subprocess.run(
        [*SERVEPACK, "run", "--no-smoke", "--prompt-tokens", str(h.context_tokens), "--gen-tokens",
         str(h.gen_tokens), "--samples", "5", "--out", str(out)],
        capture_output=True, text=True, timeout=900, check=False, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    page = out / "report.html"
    assert page.is_file()
    shot = tmp_path / "report.png"  # kept under the test's output
    got = load(page, tmp_path / "chromium", screenshot=shot)
    assert got.console == [] and got.page_requests == []
    bench = json.loads((out / "server_bench.json").read_text())
    cell = next(c for c in bench["cells"]
                if (c["context_tokens"], c["concurrency"], c["gen_tokens"]) == (h.context_tokens, 1, h.gen_tokens))
    want = f"{cell[f'{h.metric}_{h.source}']['median']:,.2f}"
    spans = re.findall(r'<span class="headline-value"[^>]*>([^<]+)</span>', got.dom)
    if evidence_for(out, load_pack(None).pack).headline.stat is not None:
        assert spans == [want]
    else:  # a loaded host makes the run noisy (contended or too wide): then the page shows no headline figure
        assert spans == []
    charts = re.findall(r'<svg[^>]*data-chart="([^"]+)"', got.dom)
    assert {"g0-speed", "g0-dist", "g0-mem-run", "g0-roof"} <= set(charts)
    assert "no smoke suite in this run" in got.dom
    assert ink_pixels(shot, (0x00, 0x72, 0xB2)) > 500
