"""`servepack run` leaves report.html; headless Chromium renders it offline with every chart, no console error and
no request of its own. A control page proves each detector sees what it is meant to see."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from core_fixtures import make_pack, write_fake_server_bin
from report_browser import distinct_colours, ink_pixels, load
from report_synth import rich_run

from servepack.packs import load_pack
from servepack.pipeline import run_pack
from servepack.plan import RunOptions
from servepack.records.verify import verify_run
from servepack.report import write_report

BLUE = (0x00, 0x72, 0xB2)  # the charts' first series colour


def _keep(shot: Path, name: str) -> None:
    """Screenshots go under the test's output; SERVEPACK_TEST_ARTIFACTS keeps a copy (CI uploads it)."""
    where = os.environ.get("SERVEPACK_TEST_ARTIFACTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(where) / name)


def _charts(dom: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r'<svg[^>]*data-chart="([^"]+)".*?</svg>', dom, re.S)}


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A whole `servepack run` (bench and one smoke case) against the shared fake llama-server."""
    tmp = tmp_path_factory.mktemp("fake-run")
    pack = make_pack(tmp)
    out = tmp / "results" / "tiny-test" / "run1"
    # Five samples, fixed: a 95% interval needs at least five, whatever the host's load does to sequential sampling.
    outcome = run_pack(str(pack), options=RunOptions(out=out, server_bin=write_fake_server_bin(tmp)),
                       suites=["agent_smoke"], case_ids=["tool_json.weather_city"], bench_overrides={"samples": 5})
    return outcome.results_dir


def test_run_leaves_report_html_which_verify_treats_as_derived(fake_run: Path) -> None:
    page = (fake_run / "report.html").read_text()
    assert "<h2>tiny-test</h2>" in page and "note error" not in page
    assert {"g0-speed", "g0-dist", "g0-mem-run1", "g0-smoke-agent-smoke-run1"} <= set(_charts(page))
    rep = verify_run(fake_run)
    assert rep.ok, rep.mismatches
    assert "report.html" not in json.loads((fake_run / "receipt.json").read_text())["files"]


def test_real_run_report_renders_offline_in_chromium(fake_run: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    got = load(fake_run / "report.html", tmp_path / "chromium", screenshot=shot)
    _keep(shot, "fake-run-report.png")
    assert got.console == [], got.console
    assert got.page_requests == []
    charts = _charts(got.dom)
    assert {"g0-speed", "g0-dist", "g0-mem-run1", "g0-smoke-agent-smoke-run1"} <= set(charts)
    for name, svg in charts.items():
        assert svg.count("<path") > 5, name
    bench = json.loads((fake_run / "server_bench.json").read_text())
    for cell in bench["cells"]:
        st = cell["decode_tok_s_server"]
        assert f"{st['median']:,.2f}<span class=\"ci\">" in got.dom  # the speed table, as the browser parsed it
    assert distinct_colours(shot) > 200 and ink_pixels(shot, BLUE) > 500


def test_headline_in_the_browser_equals_server_bench_json(tmp_path: Path) -> None:
    pack = load_pack(None).pack
    run = rich_run(tmp_path / pack.id, "r1", gen=128, samples=4)
    page = write_report([run])
    shot = tmp_path / "rich.png"
    got = load(page, tmp_path / "chromium", screenshot=shot, height=7800)
    _keep(shot, "rich-report.png")
    assert got.console == [] and got.page_requests == []
    h = pack.claims.headline
    bench = json.loads((run / "server_bench.json").read_text())
    cell = next(c for c in bench["cells"]
                if (c["context_tokens"], c["concurrency"], c["gen_tokens"]) == (h.context_tokens, 1, h.gen_tokens))
    want = f"{cell[f'{h.metric}_{h.source}']['median']:,.2f}"
    assert re.findall(r'<span class="headline-value"[^>]*>([^<]+)</span>', got.dom) == [want]
    assert set(_charts(got.dom)) == {"g0-speed", "g0-dist", "g0-conc", "g0-mem-r1", "g0-roof",
                                     "g0-smoke-agent-smoke-r1"}
    assert ink_pixels(shot, BLUE) > 2000


def test_the_detectors_see_a_request_and_a_console_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><h1>control</h1><img src="http://example.invalid/p.png">'
                   '<script>console.error("boom")</script></body></html>')
    got = load(bad, tmp_path / "chromium")
    assert got.page_requests == ["http://example.invalid/p.png"]
    assert len(got.console) == 1 and '"boom"' in got.console[0]
    assert "<h1>control</h1>" in got.dom
